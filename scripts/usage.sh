# Sourced by the shell scripts: `script_usage SCRIPT "$@"` prints SCRIPT's header comment (its
# usage) and exits 0 when an argument is -h or --help, before the script does any work.
script_usage() {
  local script=$1
  shift
  for arg in "$@"; do
    case $arg in
      -h | --help)
        sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$script"
        exit 0
        ;;
    esac
  done
}

# `refuse_arguments SCRIPT ALLOWED... -- "$@"`: a one-line error and exit 2 for an argument
# that is not one of ALLOWED (a script that would otherwise start its work regardless).
refuse_arguments() {
  local script=$1 allowed=() arg
  shift
  while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do allowed+=("$1"); shift; done
  shift
  for arg in "$@"; do
    if [[ " ${allowed[*]:-} " != *" $arg "* ]]; then
      echo "$(basename "$script"): error: unknown argument '$arg'; expected ${allowed[*]:-none} (see --help)" >&2
      exit 2
    fi
  done
}
