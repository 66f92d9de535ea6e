# cmake -DIN=<herdlet.upload> -P compress_upload.cmake
# Writes IN.gz (gzip -6, no name or time stamp: the same bytes for the same input) and
# IN.gz.sha256 (the SHA-256 of IN, the uncompressed file): bootstrap sends IN.gz to nodes that have
# gzip when the sidecar names the binary it is uploading (controller/bootstrap/agent_bootstrap.hpp).
execute_process(COMMAND gzip -6 -n -c ${IN} OUTPUT_FILE ${IN}.gz.tmp RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  file(REMOVE ${IN}.gz.tmp ${IN}.gz ${IN}.gz.sha256)
  message(FATAL_ERROR "gzip ${IN} failed: ${rc}")
endif()
file(SHA256 ${IN} sha)
file(RENAME ${IN}.gz.tmp ${IN}.gz)
file(WRITE ${IN}.gz.sha256 "${sha}\n")
