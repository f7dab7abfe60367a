# shellcheck shell=bash
# Helpers shared by scripts/bench, scripts/bench-scale and scripts/bench-workspace (sourced, not
# run). Every helper works on figures it was handed; none invents one.

bench_step() { printf '==> %s\n' "$*" >&2; }
bench_die() { printf '%s: %s\n' "${bench_name:-bench}" "$*" >&2; exit 1; }

# bench_build: builds the release binary (unless AIRLOCK_BENCH_BIN names one) and sets $airlock.
bench_build() {
    if [[ -n ${AIRLOCK_BENCH_BIN:-} ]]; then
        airlock=$AIRLOCK_BENCH_BIN
    else
        bench_step "building airlock (release)"
        cargo build --release -q -p airlock
        airlock=${CARGO_TARGET_DIR:-$repo/target}/release/airlock
    fi
    [[ -x $airlock ]] || bench_die "no airlock binary at $airlock"
}

# bench_world PREFIX: a throw-away HOME and XDG world under /tmp (the root disk), so no user
# config or state is read or written. Sets $world; the runtime root is left to the caller.
bench_world() {
    world=$(mktemp -d "/tmp/$1.XXXXXX")
    export HOME=$world/home XDG_CONFIG_HOME=$world/home/.config
    export XDG_STATE_HOME=$world/home/.local/state XDG_DATA_HOME=$world/home/.local/share
    export XDG_CACHE_HOME=$world/home/.cache
    mkdir -p "$HOME" "$XDG_CONFIG_HOME/airlock"
}

# bench_runtime_tmpfs: XDG_RUNTIME_DIR on tmpfs (/dev/shm), as a desktop's /run/user/<uid>.
bench_runtime_tmpfs() {
    bench_runtime=$(mktemp -d /dev/shm/airlock-bench-run.XXXXXX)
    chmod 700 "$bench_runtime"
    export XDG_RUNTIME_DIR=$bench_runtime
}

# bench_bwrap_layout AIRLOCK DIR: reads the mount layout of a sandbox `AIRLOCK run` makes here
# (run in the project directory) and sets the array $bench_layout_opts to bubblewrap options
# that build the same layout (scripts/bench-layout-bwrap.py says how each mount is translated),
# $bench_layout_mounts to the sandbox's mount count, $bench_layout_overlays to 1 when this bwrap
# has overlays (`--overlay-src`, 0.9 and later), else 0. DIR gets the layout and empty stand-ins.
# The mount points are taken as mountinfo prints them: a benchmark world's paths have no space
# to escape.
bench_bwrap_layout() {
    local airlock=$1 dir=$2
    # shellcheck disable=SC2016
    local script='
while IFS= read -r line; do
    set -- $line
    if [ -d "$5" ]; then echo "d $line"; else echo "f $line"; fi
done < /proc/self/mountinfo
for l in /bin /sbin /lib /lib32 /lib64 /libx32; do [ -L "$l" ] && echo "link $l $(readlink "$l")"; done
echo "ids $(id -u) $(id -g)"'
    mkdir -p "$dir/standins"
    "$airlock" run -- sh -c "$script" >"$dir/layout" ||
        bench_die "cannot read the mount layout of a sandbox"
    bench_layout_overlays=0
    if bwrap --help 2>&1 | grep -q -- --overlay-src; then
        bench_layout_overlays=1
    fi
    python3 "$repo/scripts/bench-layout-bwrap.py" "$dir/standins" "$bench_layout_overlays" \
        <"$dir/layout" >"$dir/layout.opts" ||
        bench_die "cannot translate the sandbox's layout (see $dir/layout)"
    mapfile -d '' bench_layout_opts <"$dir/layout.opts"
    ((${#bench_layout_opts[@]} >= 20)) ||
        bench_die "the sandbox's layout gave only ${#bench_layout_opts[@]} bwrap options (see $dir/layout)"
    bench_layout_mounts=$(grep -c '^[df] ' "$dir/layout")
}

# bench_stats FILE -> "median mean min max n" of the numbers in FILE, one a line.
bench_stats() {
    sort -n "$1" | awk '{ v[NR] = $1; s += $1 } END {
        if (NR == 0) { print "- - - - 0"; exit }
        m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
        printf "%.3f %.3f %.3f %.3f %d\n", m, s / NR, v[1], v[NR], NR }'
}

# bench_median FILE -> the median alone.
bench_median() { bench_stats "$1" | cut -d' ' -f1; }

# bench_ratio A B -> A/B with two decimals ("-" when either is missing).
bench_ratio() {
    awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.2f", a / b }'
}

# bench_time_ms FILE CMD...: runs CMD (output discarded), appends its wall time in ms to FILE.
# A failing command stops the benchmark: timing a command that did not do its job means nothing.
bench_time_ms() {
    local file=$1 t0 t1
    shift
    t0=$EPOCHREALTIME
    if ! "$@" >/dev/null 2>"$world/last.err"; then
        printf '%s: failed: %s\n' "${bench_name:-bench}" "$*" >&2
        cat "$world/last.err" >&2
        exit 1
    fi
    t1=$EPOCHREALTIME
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f\n", (b - a) * 1000 }' >>"$file"
}

# bench_quiet CMD...: runs CMD untimed, output discarded; on failure shows its stderr and stops.
bench_quiet() {
    "$@" >/dev/null 2>"$world/last.err" || {
        printf '%s: failed: %s\n' "${bench_name:-bench}" "$*" >&2
        cat "$world/last.err" >&2
        exit 1
    }
}

# bench_cpu_ms FILE CMD...: runs CMD under `perf stat` (task-clock of every process it starts,
# inherited across fork) and appends the CPU milliseconds to FILE.
bench_cpu_ms() {
    local file=$1 out
    shift
    out=$(perf stat -x, -e task-clock -- "$@" 2>&1 >/dev/null) ||
        bench_die "failed under perf: $* ($out)"
    awk -F, '$3 == "task-clock" { printf "%.3f\n", $1 }' <<<"$out" | tail -n1 >>"$file"
}

# bench_pss_kb PID -> the process's proportional set size in KiB (0 when it is gone).
bench_pss_kb() {
    awk '$1 == "Pss:" { print $2; found = 1 } END { if (!found) print 0 }' \
        "/proc/$1/smaps_rollup" 2>/dev/null || echo 0
}

# bench_descendants PID -> PID and all its descendants, one a line.
bench_descendants() {
    local root=$1
    ps -e -o pid=,ppid= | awk -v r="$root" '
        { parent[$1] = $2; pids[NR] = $1 }
        END {
            keep[r] = 1; changed = 1
            while (changed) {
                changed = 0
                for (i in pids) { p = pids[i]; if (!(p in keep) && (parent[p] in keep)) { keep[p] = 1; changed = 1 } }
            }
            for (p in keep) print p
        }'
}

# bench_role PID KEEPER GUEST -> keeper, proxy, init, guest-pid1, janitor, session or other
bench_role() {
    local cmd exe
    [[ $1 == "$2" ]] && { echo keeper; return; }
    [[ $1 == "$3" ]] && { echo guest-pid1; return; }
    exe=$(readlink "/proc/$1/exe" 2>/dev/null || true)
    cmd=$(tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null || true)
    if [[ $exe != "$airlock" && $exe != "$airlock (deleted)" ]]; then echo session; return; fi
    case $cmd in
    *__proxy*) echo proxy ;;
    *__init*) echo init ;;
    *__keeper*) echo janitor ;; # a fork of the keeper: same command line, other pid
    *) echo other ;;
    esac
}

# bench_sandbox_procs [SETTLE] -> "role pss_kb threads fds" for every process of the current
# project's sandbox: the keeper's process tree (`status --json` names the keeper and the guest's
# PID 1). `status` itself wakes the keeper and PID 1, which map code again for it; SETTLE
# seconds (default 0) between it and the readings let them give those pages back (they do after
# 2 s without work), so an idle figure is not the figure of the measurement's own request.
bench_sandbox_procs() {
    local st keeper guest pid threads fds settle=${1:-0}
    st=$("$airlock" status --json | tr -d ' \n')
    keeper=$(grep -o '"keeper":{"pid":[0-9]*' <<<"$st" | grep -o '[0-9]*$') || true
    guest=$(grep -o '"guest":{"pid":[0-9]*' <<<"$st" | grep -o '[0-9]*$') || true
    [[ -n $keeper && -n $guest ]] || bench_die "no keeper or guest pid in \`status --json\`: $st"
    sleep "$settle"
    while read -r pid; do
        [[ -r /proc/$pid/status ]] || continue
        threads=$(awk '$1 == "Threads:" { print $2 }' "/proc/$pid/status")
        fds=$(find "/proc/$pid/fd" -mindepth 1 2>/dev/null | grep -c . || true)
        printf '%s %s %s %s\n' "$(bench_role "$pid" "$keeper" "$guest")" "$(bench_pss_kb "$pid")" \
            "$threads" "$fds"
    done < <(bench_descendants "$keeper")
}

# bench_machine: a markdown list of what ran where, with the load average now.
bench_machine() {
    local cpu mem os
    cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
    mem=$(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)
    os=$(. /etc/os-release && echo "$PRETTY_NAME")
    printf -- '- CPU: %s (%s cores available); memory %s; %s, kernel %s\n' \
        "$cpu" "$(nproc)" "$mem" "$os" "$(uname -r)"
    printf -- '- airlock source revision %s (%s), invoking user `%s`\n' \
        "$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)" \
        "$(git -C "$repo" rev-parse --abbrev-ref HEAD 2>/dev/null || echo unknown)" "$(id -un)"
}

# bench_write_section MARKER FILE: replaces the text between `<!-- MARKER:begin -->` and
# `<!-- MARKER:end -->` in docs/benchmarks.md with FILE's text (appended when absent); the
# other sections belong to other scripts and are kept as they are.
bench_write_section() {
    local marker=$1 file=$2 doc=$repo/docs/benchmarks.md tmp
    [[ -f $doc ]] || printf '# Benchmarks\n' >"$doc"
    tmp=$(mktemp "$doc.XXXXXX")
    SECTION=$(cat "$file") MARK=$marker awk '
        BEGIN { b = "<!-- " ENVIRON["MARK"] ":begin -->"; e = "<!-- " ENVIRON["MARK"] ":end -->"
                s = b "\n" ENVIRON["SECTION"] "\n" e }
        $0 == b { print s; skip = 1; done = 1; next }
        $0 == e { skip = 0; next }
        !skip { print }
        END { if (!done) print "\n" s }
    ' "$doc" >"$tmp"
    mv "$tmp" "$doc"
    bench_step "updated the $marker section of docs/benchmarks.md"
}
