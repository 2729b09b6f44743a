# Install rules and the COATConfig.cmake package (lib/cmake/coat), so that
#   cmake --install build --prefix P
# gives an embedder headers, libraries, coat-opt, CoatPlugin.so and
#   find_package(COAT CONFIG)  ->  COAT::MLIRCoat, COAT::MLIRCoatRegistration, ...
# test/package is a consumer of it; scripts/check_package.sh builds and runs it.
include(CMakePackageConfigHelpers)

set(COAT_INSTALL_PACKAGE_DIR lib/cmake/coat)

# Public headers (and the ODS sources, for downstream TableGen), then the
# TableGen'd declarations they include.
install(DIRECTORY ${COAT_SOURCE_DIR}/include/coat
  DESTINATION include COMPONENT coat-headers
  FILES_MATCHING PATTERN "*.h" PATTERN "*.td"
  PATTERN "CMakeFiles" EXCLUDE)
install(DIRECTORY ${COAT_BINARY_DIR}/include/coat
  DESTINATION include COMPONENT coat-headers
  FILES_MATCHING PATTERN "*.h.inc"
  PATTERN "CMakeFiles" EXCLUDE)

# The libraries an embedder links. add_mlir_library is called with
# DISABLE_INSTALL in lib/, so this is their one install rule, and the one that
# puts them in the COATTargets export set. CoatNumerics is there because
# MLIRCoat links it publicly.
set(COAT_EXPORTED_LIBS CoatNumerics MLIRCoat MLIRCoatTransforms
  MLIRCoatConversion MLIRCoatPipelines MLIRCoatRegistration)
install(TARGETS ${COAT_EXPORTED_LIBS}
  EXPORT COATTargets COMPONENT coat-libraries
  ARCHIVE DESTINATION lib
  INCLUDES DESTINATION include)
# COAT::coat-opt, for consumers that run it (lit tests, code generation).
# LLVM's rules give the tool and the plugin an install RPATH of $ORIGIN/../lib
# only; they also need libMLIR.so and libLLVM.so from where they were built.
set_property(TARGET coat-opt CoatPlugin APPEND PROPERTY
  INSTALL_RPATH "${LLVM_LIBRARY_DIR}")
install(TARGETS coat-opt
  EXPORT COATTargets COMPONENT coat-opt
  RUNTIME DESTINATION bin)
# CoatPlugin.so is installed into lib/ by add_llvm_library; COATConfig.cmake
# names it in COAT_PLUGIN.

install(EXPORT COATTargets NAMESPACE COAT::
  DESTINATION ${COAT_INSTALL_PACKAGE_DIR} COMPONENT coat-libraries)

set(COAT_INSTALL_INCLUDE_DIR include)
set(COAT_INSTALL_PLUGIN lib/CoatPlugin.so)
set(COAT_INSTALL_OPT bin/coat-opt)
configure_package_config_file(
  ${COAT_SOURCE_DIR}/cmake/COATConfig.cmake.in
  ${COAT_BINARY_DIR}/${COAT_INSTALL_PACKAGE_DIR}/COATConfig.cmake
  INSTALL_DESTINATION ${COAT_INSTALL_PACKAGE_DIR}
  PATH_VARS COAT_INSTALL_INCLUDE_DIR COAT_INSTALL_PLUGIN COAT_INSTALL_OPT)
write_basic_package_version_file(
  ${COAT_BINARY_DIR}/${COAT_INSTALL_PACKAGE_DIR}/COATConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES
  ${COAT_BINARY_DIR}/${COAT_INSTALL_PACKAGE_DIR}/COATConfig.cmake
  ${COAT_BINARY_DIR}/${COAT_INSTALL_PACKAGE_DIR}/COATConfigVersion.cmake
  DESTINATION ${COAT_INSTALL_PACKAGE_DIR} COMPONENT coat-libraries)
