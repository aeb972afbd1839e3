#!/data/data/com.termux/files/usr/bin/bash
# edgellm installer for Termux: packages, the edgellm wheel, MNN from source, the runit service
# and the Termux:Boot script. Idempotent and resumable: re-running skips what is already there.
#
#   bash install.sh --wheel edgellm-*.whl [--stamp VALUE] [--skip-mnn] [--gateway]
#
# --gateway: also the OpenAI gateway (the wheel's pure-Python [gateway] extra), its API key and its
# runit service `edgellm-gateway` (run and log-run beside this script as gateway-run, gateway-log-run).
#
# Environment: EDGELLM_JOBS (MNN build parallelism, default 2: phones throttle and run out of
# memory with more), EDGELLM_MNN_VERSION (default 3.6.1) with EDGELLM_MNN_COMMIT (the commit that
# tag must resolve to; required when the version is changed), EDGELLM_MNN_SRC (a local MNN checkout,
# used as is).
set -euo pipefail

WHEEL=""
STAMP=""
SKIP_MNN=0
GATEWAY=0
while [ $# -gt 0 ]; do
    case "$1" in
        --wheel) WHEEL="$2"; shift 2 ;;
        --stamp) STAMP="$2"; shift 2 ;;
        --skip-mnn) SKIP_MNN=1; shift ;;
        --gateway) GATEWAY=1; shift ;;
        *) echo "install.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done

: "${PREFIX:?install.sh must run inside Termux (PREFIX is not set)}"
HERE="$(cd "$(dirname "$0")" && pwd)"
STATE="$HOME/.edgellm"
LOGS="$STATE/logs"
JOBS="${EDGELLM_JOBS:-2}"
MNN_VERSION="${EDGELLM_MNN_VERSION:-3.6.1}"
# Why a pinned commit: a tag can be moved; the clone is checked against the commit that 3.6.1
# pointed to when it was tested (git rev-parse '3.6.1^{commit}' on github.com/alibaba/MNN).
if [ "$MNN_VERSION" = 3.6.1 ]; then
    MNN_COMMIT="${EDGELLM_MNN_COMMIT:-d407447ed56c4121a11ccbd266dc184ca1ead0c2}"
else
    MNN_COMMIT="${EDGELLM_MNN_COMMIT:?set EDGELLM_MNN_COMMIT to the commit of MNN $MNN_VERSION}"
fi
MNN_DIR="$STATE/mnn"
mkdir -p "$LOGS" "$MNN_DIR"

say() { printf '[edgellm-install] %s\n' "$*"; }
fail() {
    printf '[edgellm-install] FAILED: %s\n' "$1" >&2
    if [ -n "${2:-}" ] && [ -f "$2" ]; then
        printf '[edgellm-install] full log: %s; last lines:\n' "$2" >&2
        tail -n 30 "$2" >&2
    fi
    exit "${3:-1}"
}

# 1. Termux packages. grpcio and numpy come from pkg: pip cannot build grpcio on the phone.
# python-cryptography: the daemon makes its TLS certificate on first start (clients pin it, so a
# squatter on the port never gets the token); pip would have to build it with Rust.
PACKAGES=(python python-numpy python-grpcio python-cryptography termux-api termux-services openssh
          git cmake ninja clang make binutils)
missing=()
for p in "${PACKAGES[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    say "pkg install ${missing[*]}"
    pkg install -y "${missing[@]}" >"$LOGS/pkg.log" 2>&1 || fail "pkg install" "$LOGS/pkg.log"
else
    say "packages already installed"
fi

# 2. edgellm and its pure-Python dependencies. --only-binary stops pip from trying to build
# grpcio or numpy from source if pkg's versions do not satisfy a pin.
# [client]: tqdm (pure Python), which edgellm.host's CLI modules import at module level.
# [gateway]: starlette, uvicorn (run on its pure-Python h11 parser), prometheus-client and their
# dependencies, all py3-none-any wheels (docs/gateway.md); --only-binary keeps it so.
EXTRAS=client
ONLY_BINARY=grpcio,numpy,cryptography
if [ "$GATEWAY" = 1 ]; then
    EXTRAS=client,gateway
    ONLY_BINARY="$ONLY_BINARY,starlette,anyio,idna,typing-extensions,uvicorn,h11,click,prometheus-client"
fi
if [ -n "$WHEEL" ]; then
    say "pip install $(basename "$WHEEL")[$EXTRAS]"
    pip install --disable-pip-version-check --upgrade --only-binary="$ONLY_BINARY" "${WHEEL}[$EXTRAS]" \
        >"$LOGS/pip.log" 2>&1 || fail "pip install of the edgellm wheel" "$LOGS/pip.log"
fi

# 3. MNN from source (no Android wheel exists). Cached by version; cmake resumes a partial build.
mnn_present() {
    [ -f "$MNN_DIR/.built-$MNN_VERSION" ] && python -c "import MNN, MNN.llm" >/dev/null 2>&1
}
build_mnn() {
    local log="$LOGS/mnn-build.log" src="${EDGELLM_MNN_SRC:-$MNN_DIR/src}"
    if [ ! -f "$src/CMakeLists.txt" ]; then
        say "downloading MNN $MNN_VERSION"
        rm -rf "$src"
        git clone --depth 1 --branch "$MNN_VERSION" https://github.com/alibaba/MNN.git "$src" \
            >"$log" 2>&1 || fail "git clone of MNN $MNN_VERSION (network?)" "$log"
    fi
    if [ -z "${EDGELLM_MNN_SRC:-}" ]; then
        head="$(git -C "$src" rev-parse HEAD 2>>"$log" || true)"
        if [ "$head" != "$MNN_COMMIT" ]; then
            rm -rf "$src"
            fail "MNN $MNN_VERSION is at commit ${head:-?}, not the pinned $MNN_COMMIT: refusing to build it" "" 4
        fi
    fi
    # Why the patch: pymnn's build scripts test platform.system() == 'Linux', but Termux's
    # Python 3.13 reports 'Android', which would pick the wrong library names and flags.
    # (`|| true`: on a resumed build the files are already patched and grep finds nothing.)
    { grep -rl "platform.system() *== *['\"]Linux['\"]" "$src/pymnn/pip_package" 2>/dev/null || true; } |
        while read -r f; do
            sed -i -E "s/platform\.system\(\) *== *(['\"])Linux(['\"])/platform.system() in (\1Linux\2, \1Android\2)/g" "$f"
        done
    say "building MNN $MNN_VERSION with -j$JOBS (30-90 minutes on a phone; log: $log)"
    mkdir -p "$MNN_DIR/build"
    {
        cmake -S "$src" -B "$MNN_DIR/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
            -DMNN_BUILD_LLM=ON -DMNN_LOW_MEMORY=ON -DMNN_BUILD_FOR_ANDROID_COMMAND=ON \
            -DMNN_SUPPORT_TRANSFORMER_FUSE=ON -DMNN_ARM82=ON -DMNN_BUILD_SHARED_LIBS=ON \
            -DMNN_SEP_BUILD=OFF -DMNN_USE_LOGCAT=OFF &&
        cmake --build "$MNN_DIR/build" -j "$JOBS"
    } >>"$log" 2>&1 || fail "MNN build (re-run to resume; try EDGELLM_JOBS=1 if the phone ran out of memory)" "$log" 3
    say "building pymnn with PYMNN_LLM_API"
    (
        cd "$src/pymnn/pip_package" &&
        MNN_BUILD_DIR="$MNN_DIR/build" PYMNN_LLM_API=ON python build_deps.py llm &&
        MNN_BUILD_DIR="$MNN_DIR/build" PYMNN_LLM_API=ON python setup.py install --version "$MNN_VERSION" --deps llm
    ) >>"$log" 2>&1 || fail "pymnn build" "$log" 3
    python -c "import MNN, MNN.llm" >>"$log" 2>&1 || fail "MNN built but 'import MNN.llm' fails" "$log" 3
    touch "$MNN_DIR/.built-$MNN_VERSION"
}
if [ "$SKIP_MNN" = 1 ]; then
    say "skipping MNN (--skip-mnn)"
elif mnn_present; then
    say "MNN $MNN_VERSION already installed"
else
    build_mnn
fi

# 3b. Schema-constrained output (docs/constrained.md). llguidance has no Android wheel: pip builds
# it from its sdist with pkg's Rust (10-20 minutes, once). Optional, so a failure is recorded in
# $STATE/deploy/constrained (read by `edgellm deploy device`), never fatal: without llguidance the
# daemon answers constrained requests with FAILED_PRECONDITION. EDGELLM_SKIP_LLGUIDANCE=1 skips it.
CONSTRAINED="$STATE/deploy/constrained"
mkdir -p "$STATE/deploy"
LLG_LOG="$LOGS/llguidance.log"
if python -c "import llguidance" >/dev/null 2>&1; then
    say "llguidance already installed"
    printf 'available\n' >"$CONSTRAINED"
elif [ "${EDGELLM_SKIP_LLGUIDANCE:-0}" = 1 ]; then
    say "skipping llguidance (EDGELLM_SKIP_LLGUIDANCE=1)"
    printf 'unavailable: skipped (EDGELLM_SKIP_LLGUIDANCE=1)\n' >"$CONSTRAINED"
else
    say "pip install llguidance, built with Rust (10-20 minutes once; log: $LLG_LOG)"
    if { dpkg -s rust >/dev/null 2>&1 || pkg install -y rust; } >"$LLG_LOG" 2>&1 &&
        pip install --disable-pip-version-check 'llguidance>=1.9.1,<2' >>"$LLG_LOG" 2>&1 &&
        python -c "import llguidance" >>"$LLG_LOG" 2>&1; then
        printf 'available\n' >"$CONSTRAINED"
    else
        say "llguidance did not install (log: $LLG_LOG): constrained requests will get FAILED_PRECONDITION"
        printf 'unavailable: pip install llguidance failed (log: %s)\n' "$LLG_LOG" >"$CONSTRAINED"
    fi
fi

# 4. The daemon's bearer token: 256 bits from the kernel's CSPRNG (the source Python's `secrets`
# reads), mode 0600, made once. `edgellm deploy device` copies it to the host over adb/ssh; the
# daemon would also make one on its first start.
if [ ! -s "$STATE/token" ]; then
    (umask 077 && head -c 32 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n' >"$STATE/token.tmp" &&
        mv "$STATE/token.tmp" "$STATE/token") || fail "could not write $STATE/token"
    say "made the daemon's token in $STATE/token (0600)"
fi

# 4b. The gateway's API key, made like the token (loopback on a phone is shared by every app, so the
# gateway refuses callers without it). In the gateway's default place, so `edgellm token rotate
# --gateway` in Termux rotates it. It never leaves the phone unless the user copies it.
GATEWAY_KEY="$HOME/.config/edgellm/gateway-key"
if [ "$GATEWAY" = 1 ] && [ ! -s "$GATEWAY_KEY" ]; then
    (umask 077 && mkdir -p "$(dirname "$GATEWAY_KEY")" &&
        head -c 32 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n' >"$GATEWAY_KEY.tmp" &&
        mv "$GATEWAY_KEY.tmp" "$GATEWAY_KEY") || fail "could not write $GATEWAY_KEY"
    say "made the gateway's API key in $GATEWAY_KEY (0600)"
fi

# 5. runit service (termux-services) with svlogd logging, and the Termux:Boot script.
SVC="$PREFIX/var/service/edgellm"
mkdir -p "$SVC/log" "$HOME/.termux/boot"
install -m 755 "$HERE/run" "$SVC/run"
install -m 755 "$HERE/log-run" "$SVC/log/run"
install -m 755 "$HERE/start-edgellm" "$HOME/.termux/boot/start-edgellm"
say "service installed in $SVC; boot script in ~/.termux/boot/start-edgellm"
if [ "$GATEWAY" = 1 ]; then
    # The boot script starts every enabled service, so the gateway comes back after a reboot too.
    GW_SVC="$PREFIX/var/service/edgellm-gateway"
    mkdir -p "$GW_SVC/log"
    install -m 755 "$HERE/gateway-run" "$GW_SVC/run"
    install -m 755 "$HERE/gateway-log-run" "$GW_SVC/log/run"
    say "gateway service installed in $GW_SVC"
fi

if [ -n "$STAMP" ]; then
    mkdir -p "$STATE/deploy"
    printf '%s\n' "$STAMP" >"$STATE/deploy/installed.stamp"
fi
say "done"
