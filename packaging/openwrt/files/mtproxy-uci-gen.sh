# mtproxy-uci-gen.sh: turns the UCI section mtproxy.SECTION into mtproxy.conf text (POSIX sh, sourced).
# shellcheck shell=sh
#
# Sourced by /etc/init.d/mtproxy after `config_load mtproxy` (OpenWrt's /lib/functions.sh), and
# by the tests after the shim in ../test/uci-shim.sh: it only uses config_get and
# config_list_foreach. Functions:
#   mtproxy_uci_enabled SECTION   status 0 if option enabled is true
#   mtproxy_uci_gen SECTION       writes the config to stdout; every bad option is reported on
#                                 stderr as "mtproxy: uci: ..." and the status is then 1. Sets
#                                 mtproxy_uci_state_file to the state-file path it wrote.
# The generated file is checked again by `mtproxy --check-config`, the authority on values.

# UCI option:type:default. The mtproxy key is the option name with _ turned into -. A default
# here (the router profile) applies when the option is missing; with none, mtproxy's own
# default applies. Lists (listen, secret, dc) and port/ipv6 are handled apart.
MTPROXY_UCI_OPTIONS='
workers:uint:1
block_size:size:8k
max_buffer:size:32k
buffer_memory:size:8M
max_connections:uint:512
backlog:uint:
public_host:host:
public_port:port0:
dc_builtin:bool:
default_dc:int:
prefer_ipv6:bool:
only_ipv4:bool:
fast_mode:bool:
splice:bool:
dc_pool:uint:
allow_plain:bool:
allow_dd:bool:
allow_ee:bool:
mask:bool:
mask_host:host:
mask_port:port:
handshake_timeout:duration:
connect_timeout:duration:
idle_timeout:duration:
tcp_keepalive:duration:
sndbuf:size:
rcvbuf:size:
tcp_nodelay:bool:
replay_cache:size:1M
log_level:word:
log:log:
metrics:listen:
metrics_token:token:
metrics_public:bool:
state_file:path:/etc/mtproxy/mtproxy.state
ad_tag:host:
proxy_secret_file:path:
proxy_config_file:path:
me_pool:uint:
me_client_buffer:size:
me_request_buffer:size:
me_link_buffer:size:
me_ping_interval:duration:
'

mtproxy_uci_errors=0
mtproxy_uci_state_file=

mtproxy_uci_err() {
    printf 'mtproxy: uci: %s\n' "$*" >&2
    mtproxy_uci_errors=$((mtproxy_uci_errors + 1))
}

# mtproxy_uci_bool VALUE: prints on/off, or fails.
mtproxy_uci_bool() {
    case "$1" in
    1 | on | true | yes | enabled) echo on ;;
    0 | off | false | no | disabled) echo off ;;
    *) return 1 ;;
    esac
}

# mtproxy_uci_check TYPE VALUE: status 0 if VALUE has the form of TYPE.
mtproxy_uci_check() {
    case "$2" in
    *'
'* | *'"'* | *\\*) return 1 ;; # no newline, quote or backslash in any value
    esac
    case "$1" in
    uint) case "$2" in '' | *[!0-9]*) return 1 ;; esac ;;
    int)
        case "${2#-}" in '' | *[!0-9]*) return 1 ;; esac
        ;;
    port | port0)
        case "$2" in '' | *[!0-9]*) return 1 ;; esac
        [ "${#2}" -le 5 ] && [ "$2" -le 65535 ] || return 1
        [ "$1" = port0 ] || [ "$2" -ge 1 ] || return 1
        ;;
    size)
        mtproxy_uci_n=${2%%[!0-9]*}
        [ -n "$mtproxy_uci_n" ] || return 1
        case "${2#"$mtproxy_uci_n"}" in
        '' | [bB] | [kKmMgG] | [kKmMgG][bB] | [kKmMgG][iI][bB]) ;;
        *) return 1 ;;
        esac
        ;;
    duration)
        mtproxy_uci_n=${2%%[!0-9]*}
        [ -n "$mtproxy_uci_n" ] || return 1
        case "${2#"$mtproxy_uci_n"}" in '' | ms | s | m | h) ;; *) return 1 ;; esac
        ;;
    host) case "$2" in '' | *[!A-Za-z0-9.:_-]*) return 1 ;; esac ;;
    word) case "$2" in '' | *[!a-z]*) return 1 ;; esac ;;
    token) case "$2" in '' | *[!A-Za-z0-9._~-]*) return 1 ;; esac ;; # URL-safe: sent as ?token=
    path) case "$2" in /*) ;; *) return 1 ;; esac
        case "$2" in *[[:space:]]*) return 1 ;; esac ;;
    log) case "$2" in stderr | syslog) ;; *) mtproxy_uci_check path "$2" || return 1 ;; esac ;;
    listen) case "$2" in '' | *[!][A-Za-z0-9.:%_-]*) return 1 ;; esac ;;
    secret)
        mtproxy_uci_n=${2%%:*}
        [ "$mtproxy_uci_n" != "$2" ] || return 1
        case "$mtproxy_uci_n" in '' | *[!A-Za-z0-9_.-]*) return 1 ;; esac
        case "${2#*:}" in '' | *[!0-9A-Za-z_-]*) return 1 ;; esac
        ;;
    dc)
        mtproxy_uci_n=${2%% *}
        [ "$mtproxy_uci_n" != "$2" ] || return 1
        case "${mtproxy_uci_n#-}" in '' | *[!0-9]*) return 1 ;; esac
        case "${2#* }" in '' | *[!][A-Za-z0-9.:%_-]*) return 1 ;; esac
        ;;
    *) return 1 ;;
    esac
    return 0
}

mtproxy_uci_enabled() {
    config_get mtproxy_uci_v "$1" enabled 0
    [ "$(mtproxy_uci_bool "$mtproxy_uci_v")" = on ]
}

# config_list_foreach callback: KEY TYPE are passed after the value.
mtproxy_uci_list_item() {
    if mtproxy_uci_check "$3" "$1"; then
        printf '%s = %s\n' "$2" "$1"
    else
        case "$3" in
        secret) mtproxy_uci_err "list secret: '$1' is not NAME:SECRET" ;;
        dc) mtproxy_uci_err "list dc: '$1' is not 'ID ADDRESS:PORT'" ;;
        *) mtproxy_uci_err "list $2: '$1' is not an ADDRESS:PORT" ;;
        esac
    fi
}

# mtproxy_uci_list SECTION OPTION TYPE: a UCI list, or a single option of the same name.
mtproxy_uci_list() {
    config_get mtproxy_uci_len "$1" "${2}_LENGTH"
    if [ -n "$mtproxy_uci_len" ]; then
        config_list_foreach "$1" "$2" mtproxy_uci_list_item "$2" "$3"
    else
        config_get mtproxy_uci_v "$1" "$2"
        [ -z "$mtproxy_uci_v" ] || mtproxy_uci_list_item "$mtproxy_uci_v" "$2" "$3"
    fi
}

mtproxy_uci_gen() {
    mtproxy_uci_errors=0
    mtproxy_uci_sec=$1
    printf '# mtproxy.conf generated from /etc/config/mtproxy (section %s) by %s.\n' \
        "$mtproxy_uci_sec" "/etc/init.d/mtproxy"
    printf '# Do not edit: change the UCI config and run /etc/init.d/mtproxy reload.\n'

    config_get mtproxy_uci_v "$mtproxy_uci_sec" enabled 0
    mtproxy_uci_bool "$mtproxy_uci_v" >/dev/null ||
        mtproxy_uci_err "option enabled: '$mtproxy_uci_v' is not a boolean"

    # Listening: the listen list if given, else port (and [::]:port with ipv6 on).
    config_get mtproxy_uci_len "$mtproxy_uci_sec" listen_LENGTH
    config_get mtproxy_uci_v "$mtproxy_uci_sec" listen
    if [ -n "$mtproxy_uci_len" ] || [ -n "$mtproxy_uci_v" ]; then
        mtproxy_uci_list "$mtproxy_uci_sec" listen listen
    else
        mtproxy_uci_port='' mtproxy_uci_v6=''
        config_get mtproxy_uci_port "$mtproxy_uci_sec" port 8443
        config_get mtproxy_uci_v6 "$mtproxy_uci_sec" ipv6 0
        if ! mtproxy_uci_check port "$mtproxy_uci_port"; then
            mtproxy_uci_err "option port: '$mtproxy_uci_port' is not a port (1-65535)"
        else
            printf 'listen = 0.0.0.0:%s\n' "$mtproxy_uci_port"
            case "$(mtproxy_uci_bool "$mtproxy_uci_v6")" in
            on) printf 'listen = [::]:%s\n' "$mtproxy_uci_port" ;;
            off) ;;
            *) mtproxy_uci_err "option ipv6: '$mtproxy_uci_v6' is not a boolean" ;;
            esac
        fi
    fi
    mtproxy_uci_list "$mtproxy_uci_sec" secret secret
    mtproxy_uci_list "$mtproxy_uci_sec" dc dc

    for mtproxy_uci_spec in $MTPROXY_UCI_OPTIONS; do
        mtproxy_uci_opt=${mtproxy_uci_spec%%:*}
        mtproxy_uci_rest=${mtproxy_uci_spec#*:}
        mtproxy_uci_type=${mtproxy_uci_rest%%:*}
        mtproxy_uci_def=${mtproxy_uci_rest#*:}
        config_get mtproxy_uci_v "$mtproxy_uci_sec" "$mtproxy_uci_opt" "$mtproxy_uci_def"
        [ -n "$mtproxy_uci_v" ] || continue
        if [ "$mtproxy_uci_type" = bool ]; then
            mtproxy_uci_b=$(mtproxy_uci_bool "$mtproxy_uci_v") || {
                mtproxy_uci_err "option $mtproxy_uci_opt: '$mtproxy_uci_v' is not a boolean"
                continue
            }
            mtproxy_uci_v=$mtproxy_uci_b
        elif ! mtproxy_uci_check "$mtproxy_uci_type" "$mtproxy_uci_v"; then
            mtproxy_uci_err "option $mtproxy_uci_opt: '$mtproxy_uci_v' is not a valid" \
                "$mtproxy_uci_type"
            continue
        fi
        # shellcheck disable=SC2034 # read by the init script
        [ "$mtproxy_uci_opt" != state_file ] || mtproxy_uci_state_file=$mtproxy_uci_v
        printf '%s = %s\n' "$(echo "$mtproxy_uci_opt" | tr _ -)" "$mtproxy_uci_v"
    done
    [ "$mtproxy_uci_errors" -eq 0 ]
}
