"""modelbuild: a declarative build tool for deploying ONNX models with Apache TVM.

`modelbuild.build(recipe)` builds from Python (modelbuild.api); `modelbuild.runtime.Library(folder)` loads
and calls what it built.
"""

__all__ = ["__version__", "build"]


def __getattr__(name: str):
    # imported on first use: a program that only runs a library (modelbuild.runtime) never loads the build
    # system, and a no-op `modelbuild` command pays for none of it twice
    if name == "build":
        from modelbuild.api import build

        return build
    if name == "__version__":  # as installed, from the git tag it was built at (pyproject.toml's setuptools-scm)
        from modelbuild.versions import package_version

        return package_version()
    raise AttributeError(f"module 'modelbuild' has no attribute {name!r}")
