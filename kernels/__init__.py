"""CUDA sources of gpt2block (kernels/*.cu), shipped inside the package as gpt2block.kernels."""
