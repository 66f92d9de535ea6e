# herd_link_static_deps(target): link `target`'s third-party libraries (Boost, Protobuf, yaml-cpp,
# libuv, OpenSSL, SQLite, zlib) and libstdc++/libgcc statically, glibc dynamically, so the binary
# runs on any x86-64 Linux whose glibc is at least the build machine's (packaging/README.md).
#
# The shared objects on the link line come from imported targets that the whole project shares;
# packaging/static-link.sh swaps them for the archives found here, for this one target only.

# NAME=archive names (first found wins). NAME is what lies between "lib" and ".so" in the shared
# object's file name on the link line.
set(HERD_STATIC_ARCHIVES
    "ssl=libssl.a"
    "crypto=libcrypto.a"
    "protobuf-lite=libprotobuf-lite.a"
    "boost_json=libboost_json.a"
    "boost_container=libboost_container.a"
    "boost_system=libboost_system.a"
    "yaml-cpp=libyaml-cpp.a"
    "uv=libuv_a.a,libuv.a"  # Debian names libuv's archive libuv_a.a
    "sqlite3=libsqlite3.a")
# Archives appended to the group: dependencies that come in through a shared object's DT_NEEDED
# rather than through CMake, as NAME=archive. None today: libprotobuf.so needed libz.so, the lite
# runtime (shared/proto) needs nothing.
set(HERD_STATIC_EXTRA_ARCHIVES "")

function(_herd_find_static_archive var entry)
  string(FIND "${entry}" "=" eq)
  string(SUBSTRING "${entry}" 0 ${eq} name)
  math(EXPR from "${eq} + 1")
  string(SUBSTRING "${entry}" ${from} -1 files)
  string(REPLACE "," ";" files "${files}")
  string(MAKE_C_IDENTIFIER "HERD_STATIC_ARCHIVE_${name}" cache_var)
  find_library(${cache_var} NAMES ${files})
  if(NOT ${cache_var})
    message(FATAL_ERROR "static archive for ${name} not found (looked for ${files}); install the "
                        "library's -dev package or configure with -DHERD_STATIC_AGENT=OFF")
  endif()
  set(${var} "${name}" "${${cache_var}}" PARENT_SCOPE)
endfunction()

# KEEP_DYNAMIC names (as in HERD_STATIC_ARCHIVES) stay shared objects for this target.
function(herd_link_static_deps target)
  cmake_parse_arguments(L "" "" "KEEP_DYNAMIC" ${ARGN})
  set(launcher bash ${PROJECT_SOURCE_DIR}/packaging/static-link.sh)
  foreach(name IN LISTS L_KEEP_DYNAMIC)
    list(APPEND launcher "${name}=-")
  endforeach()
  foreach(entry IN LISTS HERD_STATIC_ARCHIVES)
    _herd_find_static_archive(found "${entry}")
    list(GET found 0 name)
    list(GET found 1 path)
    list(APPEND launcher "${name}=${path}")
  endforeach()
  foreach(entry IN LISTS HERD_STATIC_EXTRA_ARCHIVES)
    _herd_find_static_archive(found "${entry}")
    list(GET found 1 path)
    list(APPEND launcher "+${path}")
  endforeach()
  list(APPEND launcher "--")
  set_property(TARGET ${target} PROPERTY CXX_LINKER_LAUNCHER ${launcher})
  target_link_options(${target} PRIVATE -static-libstdc++ -static-libgcc)
  # Relinking must follow edits of the launcher.
  set_property(TARGET ${target} APPEND PROPERTY LINK_DEPENDS
                                                ${PROJECT_SOURCE_DIR}/packaging/static-link.sh)
endfunction()
