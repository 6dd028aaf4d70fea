#!/usr/bin/env bash
# Builds graphtier's CPU image with podman on a machine that reaches no container registry (Debian's
# archive and the package index only), from deploy/container/Dockerfile unchanged:
#   deploy/container/build-local.sh [TAG] [CONTEXT]      (TAG: graphtier:cpu; CONTEXT: this checkout)
# Needs root and Debian's podman, runc and mmdebstrap (apt-get install podman runc mmdebstrap).
#  - The base: Debian (bookworm, its Python 3.11) made by mmdebstrap --variant=minbase, without
#    docs, man pages and locales, and with apt keeping no package files or caches after a step, as
#    Debian's own images do (the Dockerfile's `rm -rf /var/lib/apt/lists/*` assumes it: without it
#    the runtime stage kept 86 MB of .debs and package caches); imported once as
#    localhost/graphtier-debian:<suite>-<hash of this recipe>; both stages build on it.
#  - podman's settings for this run only (CONTAINERS_CONF, unless one is set): runc as the runtime
#    (crun refuses hosts whose cgroups are hybrid) and default ulimits at this shell's hard limits,
#    processes at most pid_max (podman's defaults are higher, and root cannot raise them where the
#    host caps them).
#  - What the host's pip uses, when present, is lent to the build (bind mounts, never in a layer):
#    its configuration (`pip config list`, written as one file at /etc/pip.conf), the CA bundle it
#    trusts (an index behind a TLS-inspecting proxy), and the local folders it names (find-links,
#    file:// indexes, a constraints file), at the same paths. A CPU torch wheel of $TORCH_SPEC's
#    release among them is what pip installs; without one, torch comes from PyTorch's CPU index.
# Prints the build time, the image's size and its largest layers.
set -euo pipefail

tag=${1:-graphtier:cpu}
repo=$(cd "$(dirname "$0")/../.." && pwd)
context=${2:-$repo}
suite=${GRAPHTIER_DEBIAN_SUITE:-bookworm}
# What apt keeps after a step in Debian's own images (/etc/apt/apt.conf.d/docker-clean there): nothing.
apt_clean='DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";'
# (the package caches the bootstrap made go too: with docker-clean in place its own clean-up keeps them)
base_options=(--variant=minbase --format=tar
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*'
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/doc/*/copyright'
    --customize-hook='rm -f "$1"/var/cache/apt/*.bin')
recipe=$(printf '%s\n' "$suite" "${base_options[@]}" "$apt_clean" | sha256sum | cut -c1-8)
base=localhost/graphtier-debian:$suite-$recipe
torch_spec=${TORCH_SPEC:-torch==2.13.0}

for tool in podman mmdebstrap; do
    command -v "$tool" >/dev/null || { echo "build-local.sh: $tool is not installed (apt-get install podman runc mmdebstrap)" >&2; exit 2; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if [ -z "${CONTAINERS_CONF:-}" ]; then
    nofile=$(ulimit -Hn); nproc=$(ulimit -Hu)
    # a limit on processes above pid_max is refused by some kernels' sandboxes (EPERM from runc)
    pid_max=$(cat /proc/sys/kernel/pid_max 2>/dev/null || echo unlimited)
    if [ "$pid_max" != unlimited ] && { [ "$nproc" = unlimited ] || [ "$nproc" -gt "$pid_max" ]; }; then nproc=$pid_max; fi
    {
        echo "[containers]"
        limits=()
        [ "$nofile" != unlimited ] && limits+=("\"nofile=$nofile:$nofile\"")
        [ "$nproc" != unlimited ] && limits+=("\"nproc=$nproc:$nproc\"")
        echo "default_ulimits = [$(IFS=,; echo "${limits[*]}")]"
        if command -v runc >/dev/null; then printf '[engine]\nruntime = "runc"\n'; fi
    } > "$work/containers.conf"
    export CONTAINERS_CONF=$work/containers.conf
fi

if ! podman image exists "$base"; then
    echo "build-local.sh: making the Debian $suite base with mmdebstrap" >&2
    mkdir "$work/apt" && printf '%s\n' "$apt_clean" > "$work/apt/docker-clean"
    mmdebstrap "${base_options[@]}" --customize-hook="copy-in $work/apt/docker-clean /etc/apt/apt.conf.d" \
        "$suite" "$work/base.tar"
    podman import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD ["/bin/bash"]' "$work/base.tar" "$base" >/dev/null
    rm -f "$work/base.tar"
fi

# The host's pip, lent to the build: its settings as one file, and every local path they name.
mounts=()
torch_index=https://download.pytorch.org/whl/cpu
if command -v pip >/dev/null; then
    python3 - "$work/pip.conf" "$torch_spec" > "$work/mounts" <<'PY'
import os, re, subprocess, sys
conf_path, torch_spec = sys.argv[1], sys.argv[2]
listed = subprocess.run(["pip", "config", "list"], capture_output=True, text=True).stdout
settings = {}
for line in listed.splitlines():  # e.g. global.cert='/etc/ssl/certs/ca-certificates.crt', :env:.find-links='/opt/wheels'
    found = re.match(r"^[^.]*\.([\w-]+)='(.*)'$", line)
    if found:
        settings[found[1]] = found[2]
cert = settings.get("cert") or os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("SSL_CERT_FILE")
if cert and os.path.isfile(cert):
    settings["cert"] = "/etc/pip-build-ca.crt"  # not the image's own bundle, which ca-certificates rewrites
    print(f"{os.path.realpath(cert)}:/etc/pip-build-ca.crt")
else:
    settings.pop("cert", None)
paths = set()
for key in ("find-links", "extra-index-url", "index-url", "constraint"):
    for value in settings.get(key, "").split():
        path = value.removeprefix("file://")
        if path.startswith("/") and os.path.exists(path):
            paths.add(os.path.dirname(path.rstrip("/")) if value.startswith("file://") else path)
for path in sorted(paths):
    print(f"{path}:{path}")
with open(conf_path, "w") as conf:
    conf.write("[global]\n" + "".join(f"{k} = {v}\n" for k, v in settings.items()))
release = torch_spec.split("==")[-1]
wheels = [
    name for folder in settings.get("find-links", "").split() if os.path.isdir(folder)
    for name in os.listdir(folder) if name.startswith(f"torch-{release}+cpu-")
]
print("CPU-TORCH" if wheels else "NO-CPU-TORCH")
PY
    while read -r line; do
        case $line in
            CPU-TORCH) torch_index="" ;;
            NO-CPU-TORCH) ;;
            *) mounts+=(--volume "$line:ro") ;;
        esac
    done < "$work/mounts"
    mounts+=(--volume "$work/pip.conf:/etc/pip.conf:ro")
fi

echo "build-local.sh: building $tag from $context (torch index: ${torch_index:-as pip is configured})" >&2
started=$(date +%s)
podman build --format docker "${mounts[@]}" \
    --build-arg BUILD_IMAGE="$base" --build-arg RUNTIME_IMAGE="$base" \
    --build-arg TORCH_SPEC="$torch_spec" --build-arg TORCH_INDEX="$torch_index" \
    -f "$context/deploy/container/Dockerfile" -t "$tag" "$context"
elapsed=$(($(date +%s) - started))
size=$(podman image inspect -f '{{.Size}}' "$tag")
echo "build-local.sh: built $tag in ${elapsed} s; image $((size / 1000000)) MB; its layers, newest first:" >&2
podman history --format '{{.Size}}\t{{.CreatedBy}}' "$tag" | cut -c1-140 >&2
