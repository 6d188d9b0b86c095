"""The compiler back end of torch-style builds: split a file into units, compile cached objects, link.

``split`` turns a torch-using ``.cu`` into a device unit (nvcc, no torch headers) and a host unit
(the host compiler, torch through a precompiled header); ``objects`` compiles each unit once into
the object cache and links a module from the objects.
"""
