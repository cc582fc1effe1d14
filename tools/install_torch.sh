#!/usr/bin/env bash
# The one place that installs PyTorch: `make install`, Binder's postBuild, the GitHub workflow
# (through make) and Gradescope's setup.sh all call this script.
#
#   tools/install_torch.sh PYTHON [auto|cpu|cuda]
#
#   cpu   the CPU build. On Linux it comes from PyTorch's own index
#         (https://download.pytorch.org/whl/cpu): about 200 MB, no CUDA libraries. On macOS
#         PyPI's build is the only one (CPU and Apple's MPS).
#   cuda  PyPI's Linux build, which is the CUDA build (several GB of NVIDIA libraries).
#         There is no CUDA build for macOS: this fails there.
#   auto  (default) cuda on Linux when `nvidia-smi -L` lists a GPU, else cpu.
#
# A torch of the right version and build is left alone; any other torch is replaced. The
# script then checks that the installed torch is the build it asked for, and fails if not.
set -euo pipefail

TORCH_VERSION=2.13.0
CPU_INDEX=https://download.pytorch.org/whl/cpu
PYPI_INDEX=https://pypi.org/simple

PY=${1:?usage: tools/install_torch.sh PYTHON [auto|cpu|cuda]}
VARIANT=${2:-auto}
OS=$(uname -s)

if [ "$VARIANT" = auto ]; then
  if [ "$OS" = Linux ] && nvidia-smi -L >/dev/null 2>&1; then VARIANT=cuda; else VARIANT=cpu; fi
fi
case "$VARIANT:$OS" in
  cpu:Linux) INDEX=$CPU_INDEX ;;
  cpu:*) INDEX=$PYPI_INDEX ;;
  cuda:Linux) INDEX=$PYPI_INDEX ;;
  cuda:*) echo "install_torch: there is no CUDA build of PyTorch for $OS (use TORCH=cpu)" >&2; exit 2 ;;
  *) echo "install_torch: unknown build '$VARIANT' (expected auto, cpu or cuda)" >&2; exit 2 ;;
esac

# "VERSION BUILD" of the installed torch, e.g. "2.13.0 cpu"; empty when torch is not installed.
installed() {
  "$PY" -c 'import torch; print(torch.__version__.split("+")[0], "cuda" if torch.version.cuda else "cpu")' \
    2>/dev/null || true
}

current=$(installed)
if [ "$current" = "$TORCH_VERSION $VARIANT" ]; then
  echo "install_torch: torch $TORCH_VERSION ($VARIANT build) is already installed"
  exit 0
fi
if [ -n "$current" ]; then
  echo "install_torch: replacing torch $current with torch $TORCH_VERSION ($VARIANT build)"
  "$PY" -m pip uninstall --yes --quiet torch
fi
echo "install_torch: torch==$TORCH_VERSION ($VARIANT build) from $INDEX"
# Only torch itself is asked of $INDEX; its dependencies (filelock, sympy, ...) come from the
# default index in a second call, so an index that is slow or unreachable is tried once, not once
# per dependency.
"$PY" -m pip install --quiet --disable-pip-version-check --no-deps "torch==$TORCH_VERSION" --index-url "$INDEX"
"$PY" -m pip install --quiet --disable-pip-version-check "torch==$TORCH_VERSION"

current=$(installed)
if [ "$current" != "$TORCH_VERSION $VARIANT" ]; then
  echo "install_torch: asked for torch $TORCH_VERSION ($VARIANT build) but got '${current:-no torch}'" >&2
  exit 1
fi
echo "install_torch: torch $current"
