"""`python -m webgpu_kernels`: the command-line interface."""

from .cli import main

main()
