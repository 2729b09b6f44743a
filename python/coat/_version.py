"""The package version: pyproject.toml reads it, and it matches the CMake
project(VERSION) that coat-opt --version reports (test_packaging checks)."""

__version__ = "0.1.0"
