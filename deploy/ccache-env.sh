# Sourced by the build scripts: lets ccache reuse objects across checkouts in
# different folders (CI builds a fresh clone each run) and across the precompiled
# header. base_dir makes the paths under the repository relative in what ccache
# hashes; nohashdir leaves the build folder out of the hash of -g compilations
# (the debug info then names the first checkout's folder); the sloppiness lets
# ccache cache compilations that use the precompiled header. A value already set
# in the environment wins.
_xmod_repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$_xmod_repo}"
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}"
unset _xmod_repo
