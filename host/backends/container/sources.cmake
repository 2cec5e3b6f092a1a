# The podman and docker backend's sources, added to gpubox_host by host/CMakeLists.txt.
target_sources(gpubox_host PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/container.cpp
  ${CMAKE_CURRENT_LIST_DIR}/container_backend.cpp
  ${CMAKE_CURRENT_LIST_DIR}/container_flags.cpp
  ${CMAKE_CURRENT_LIST_DIR}/port_relay.cpp)
