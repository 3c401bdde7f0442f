// Compiled once to build the precompiled LibTorch header the worker targets reuse.
