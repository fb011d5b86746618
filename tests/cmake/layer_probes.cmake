# The build enforces the layer order (src/CMakeLists.txt): a probe source that sits like a file of
# a layer (its own folder holds no layer) and is linked like that layer's library must fail to
# compile when it includes a header of a layer it may not see, and must compile when it includes
# one it may: the controls, so that a failure cannot come from a broken probe. Each test builds its
# probe in this build tree (the probes are outside `all`); the lock keeps two builds of the tree
# from running at once.
function(deepinfer_layer_probe name include expect)
  set(source ${CMAKE_CURRENT_BINARY_DIR}/layer_probes/${name}.cc)
  file(CONFIGURE OUTPUT ${source} CONTENT "#include \"${include}\"\n")
  add_library(layer_probe_${name} OBJECT EXCLUDE_FROM_ALL ${source})
  target_link_libraries(layer_probe_${name} PRIVATE ${ARGN})
  add_test(NAME cmake.layers.${name} COMMAND ${CMAKE_COMMAND} --build ${PROJECT_BINARY_DIR} --target layer_probe_${name})
  set_tests_properties(cmake.layers.${name} PROPERTIES RESOURCE_LOCK build_tree TIMEOUT 300)
  if(expect STREQUAL "not_found")
    string(REPLACE "." "[.]" pattern "${include}")
    # gcc: "engine/engine.h: No such file or directory"; clang: "'engine/engine.h' file not found".
    set_tests_properties(cmake.layers.${name} PROPERTIES PASS_REGULAR_EXPRESSION
                         "${pattern}(: No such file or directory|' file not found)")
  elseif(NOT expect STREQUAL "builds")
    message(FATAL_ERROR "deepinfer_layer_probe: expect must be not_found or builds, got '${expect}'")
  endif()
endfunction()

# Upward: the lowest layer cannot reach the engine. Sideways: the kernels cannot reach the cache.
deepinfer_layer_probe(core_includes_engine engine/engine.h not_found di_core)
deepinfer_layer_probe(kernels_include_cache cache/page_pool.h not_found di_kernels_cpu)
# Controls: a layer sees itself, and what it links, however far down.
deepinfer_layer_probe(core_includes_core core/error.h builds di_core)
deepinfer_layer_probe(engine_includes_cache cache/page_pool.h builds di_engine)
