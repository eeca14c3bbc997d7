# uci-shim.sh: a tiny stand-in for OpenWrt's config_load/config_get API, to test mtproxy-uci-gen.sh.
# shellcheck shell=sh
#
# config_load NAME sources ${UCI_CONFIG_DIR:-/etc/config}/NAME: a UCI file is valid shell once
# config/option/list are functions (as on OpenWrt, where `uci export` output is read the same
# way). Values are kept in variables UCI_<section>_<option>; a list keeps <option>_LENGTH and
# <option>_ITEM<n>. Only for trusted test files: sourcing runs them.

uci_shim_section=

uci_shim_name_ok() {
    case "$1" in '' | *[!A-Za-z0-9_]*) return 1 ;; esac
}

uci_shim_set() {
    if ! { uci_shim_name_ok "$1" && uci_shim_name_ok "$2"; }; then
        echo "uci-shim: bad name '$1.$2'" >&2
        return 1
    fi
    eval "UCI_${1}_${2}=\$3"
}

config() {
    uci_shim_section=${2:-unnamed}
    uci_shim_set "$uci_shim_section" TYPE "$1"
}

option() {
    uci_shim_set "$uci_shim_section" "$1" "$2"
}

list() {
    uci_shim_n=''
    config_get uci_shim_n "$uci_shim_section" "${1}_LENGTH" 0
    uci_shim_n=$((uci_shim_n + 1))
    uci_shim_set "$uci_shim_section" "${1}_ITEM$uci_shim_n" "$2"
    uci_shim_set "$uci_shim_section" "${1}_LENGTH" "$uci_shim_n"
}

config_load() {
    # shellcheck source=/dev/null
    . "${UCI_CONFIG_DIR:-/etc/config}/$1"
}

# config_get VAR SECTION OPTION [DEFAULT]
config_get() {
    uci_shim_name_ok "$1" && uci_shim_name_ok "$2" && uci_shim_name_ok "$3" || return 1
    eval "$1=\${UCI_${2}_${3}:-\${4-}}"
}

# config_list_foreach SECTION OPTION FUNCTION [ARGS...]
config_list_foreach() {
    uci_shim_s=$1 uci_shim_o=$2 uci_shim_f=$3
    shift 3
    uci_shim_len='' uci_shim_i=1
    config_get uci_shim_len "$uci_shim_s" "${uci_shim_o}_LENGTH" 0
    while [ "$uci_shim_i" -le "$uci_shim_len" ]; do
        uci_shim_item=''
        config_get uci_shim_item "$uci_shim_s" "${uci_shim_o}_ITEM$uci_shim_i"
        "$uci_shim_f" "$uci_shim_item" "$@"
        uci_shim_i=$((uci_shim_i + 1))
    done
}
