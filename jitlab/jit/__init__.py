"""The JIT: a snippet file → a callable module, in order parse → codegen → build and cache → load.

``parse`` reads the snippet (tree-sitter-cuda); ``codegen`` plans the sources a build compiles;
``builder`` keys the plan and compiles it once into the cache (``cache``) with nvcc/ninja
(``objects``, ``split``) or NVRTC (``nvrtc``); ``loader`` and ``launch`` turn the build into Python
calls. ``api`` holds the front-door functions ``load``, ``build`` and ``clean``. ``plan`` holds the data
the stages pass on (units, flags, objects, the ``Manifest`` a cache entry records) and imports none of them.
"""
