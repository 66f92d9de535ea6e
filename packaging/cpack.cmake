# The herd .deb: /usr/bin/herd, /usr/bin/herdlet, the system unit, the supervisor. Only the
# `herd` install component goes in, whatever else the project may install.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME herd)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "herd")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "launch distributed PyTorch jobs on clusters of machines")
# The synopsis is CPACK_PACKAGE_DESCRIPTION_SUMMARY; this is the body (CPack indents it).
string(CONCAT CPACK_DEBIAN_PACKAGE_DESCRIPTION
              "herd provisions machines, installs its node agent (herdlet) on them over SSH\n"
              "and runs jobs as gangs across the nodes, with logs, queues and cancellation.\n"
              "This package holds the controller CLI (herd), the agent (herdlet), its systemd\n"
              "unit and its supervisor for machines without systemd.")
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "herd developers <herd-dev@herd.invalid>")
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# herd reaches nodes with ssh and syncs workdirs with rsync; the libraries herd links
# dynamically are found by dpkg-shlibdeps (herdlet needs only libc6).
set(CPACK_DEBIAN_PACKAGE_DEPENDS "openssh-client, rsync")
find_program(HERD_DPKG_SHLIBDEPS dpkg-shlibdeps)
if(HERD_DPKG_SHLIBDEPS)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
endif()
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_INSTALL_CMAKE_PROJECTS "${CMAKE_BINARY_DIR};herd;herd;/")
include(CPack)
