#!/bin/bash

__tokenbridge_cursor_index_in_current_word() {
    local remaining="${COMP_LINE}"

    local word
    for word in "${COMP_WORDS[@]::COMP_CWORD}"; do
        remaining="${remaining##*([[:space:]])"${word}"*([[:space:]])}"
    done

    local -ir index="$((COMP_POINT - ${#COMP_LINE} + ${#remaining}))"
    if [[ "${index}" -le 0 ]]; then
        printf 0
    else
        printf %s "${index}"
    fi
}

# positional arguments:
#
# - 1: the current (sub)command's count of positional arguments
#
# required variables:
#
# - repeating_flags: the repeating flags that the current (sub)command can accept
# - non_repeating_flags: the non-repeating flags that the current (sub)command can accept
# - repeating_options: the repeating options that the current (sub)command can accept
# - non_repeating_options: the non-repeating options that the current (sub)command can accept
# - positional_number: value ignored
# - unparsed_words: unparsed words from the current command line
#
# modified variables:
#
# - non_repeating_flags: remove flags for this (sub)command that are already on the command line
# - non_repeating_options: remove options for this (sub)command that are already on the command line
# - positional_number: set to the current positional number
# - unparsed_words: remove all flags, options, and option values for this (sub)command
__tokenbridge_offer_flags_options() {
    local -ir positional_count="${1}"
    positional_number=0

    local was_flag_option_terminator_seen=false
    local is_parsing_option_value=false

    local -ar unparsed_word_indices=("${!unparsed_words[@]}")
    local -i word_index
    for word_index in "${unparsed_word_indices[@]}"; do
        if "${is_parsing_option_value}"; then
            # This word is an option value:
            # Reset marker for next word iff not currently the last word
            [[ "${word_index}" -ne "${unparsed_word_indices[${#unparsed_word_indices[@]} - 1]}" ]] && is_parsing_option_value=false
            unset "unparsed_words[${word_index}]"
            # Do not process this word as a flag or an option
            continue
        fi

        local word="${unparsed_words["${word_index}"]}"
        if ! "${was_flag_option_terminator_seen}"; then
            case "${word}" in
            --)
                unset "unparsed_words[${word_index}]"
                # by itself -- is a flag/option terminator, but if it is the last word, it is the start of a completion
                if [[ "${word_index}" -ne "${unparsed_word_indices[${#unparsed_word_indices[@]} - 1]}" ]]; then
                    was_flag_option_terminator_seen=true
                fi
                continue
                ;;
            -*)
                # ${word} is a flag or an option
                # If ${word} is an option, mark that the next word to be parsed is an option value
                local option
                for option in "${repeating_options[@]}" "${non_repeating_options[@]}"; do
                    [[ "${word}" = "${option}" ]] && is_parsing_option_value=true && break
                done

                # Remove ${word} from ${non_repeating_flags} or ${non_repeating_options} so it isn't offered again
                local not_found=true
                local -i index
                for index in "${!non_repeating_flags[@]}"; do
                    if [[ "${non_repeating_flags[${index}]}" = "${word}" ]]; then
                        unset "non_repeating_flags[${index}]"
                        non_repeating_flags=("${non_repeating_flags[@]}")
                        not_found=false
                        break
                    fi
                done
                if "${not_found}"; then
                    for index in "${!non_repeating_flags[@]}"; do
                        if [[ "${non_repeating_flags[${index}]}" = "${word}" ]]; then
                            unset "non_repeating_flags[${index}]"
                            non_repeating_flags=("${non_repeating_flags[@]}")
                            break
                        fi
                    done
                fi
                unset "unparsed_words[${word_index}]"
                continue
                ;;
            esac
        fi

        # ${word} is neither a flag, nor an option, nor an option value
        if [[ "${positional_number}" -lt "${positional_count}" || "${positional_count}" -lt 0 ]]; then
            # ${word} is a positional
            ((positional_number++))
            unset "unparsed_words[${word_index}]"
        else
            if [[ -z "${word}" ]]; then
                # Could be completing a flag, option, or subcommand
                positional_number=-1
            else
                # ${word} is a subcommand or invalid, so stop processing this (sub)command
                positional_number=-2
            fi
            break
        fi
    done

    unparsed_words=("${unparsed_words[@]}")

    if\
        ! "${was_flag_option_terminator_seen}"\
        && ! "${is_parsing_option_value}"\
        && [[ ("${cur}" = -* && "${positional_number}" -ge 0) || "${positional_number}" -eq -1 ]]
    then
        COMPREPLY+=($(compgen -W "${repeating_flags[*]} ${non_repeating_flags[*]} ${repeating_options[*]} ${non_repeating_options[*]}" -- "${cur}"))
    fi
}

__tokenbridge_add_completions() {
    local completion
    while IFS='' read -r completion; do
        COMPREPLY+=("${completion}")
    done < <(IFS=$'\n' compgen "${@}" -- "${cur}")
}

__tokenbridge_custom_complete() {
    if [[ -n "${cur}" || -z ${COMP_WORDS[${COMP_CWORD}]} || "${COMP_LINE:${COMP_POINT}:1}" != ' ' ]]; then
        local -ar words=("${COMP_WORDS[@]}")
    else
        local -ar words=("${COMP_WORDS[@]::${COMP_CWORD}}" '' "${COMP_WORDS[@]:${COMP_CWORD}}")
    fi

    "${COMP_WORDS[0]}" "${@}" "${words[@]}"
}

_tokenbridge() {
    local state
    state="$(shopt -p;shopt -po)"
    trap "${state//$'\n'/;}" RETURN
    shopt -s extglob
    set +o history +o posix

    local -xr SAP_SHELL=bash
    local -x SAP_SHELL_VERSION
    SAP_SHELL_VERSION="$(IFS='.';printf %s "${BASH_VERSINFO[*]}")"
    local -r SAP_SHELL_VERSION

    local -r cur="${2}"
    local -r prev="${3}"

    local -i positional_number
    local -a unparsed_words=("${COMP_WORDS[@]:1:${COMP_CWORD}}")

    local -a repeating_flags=()
    local -a non_repeating_flags=(--version -h --help)
    local -a repeating_options=()
    local -a non_repeating_options=()
    __tokenbridge_offer_flags_options 0

    # Offer subcommand / subcommand argument completions
    local -r subcommand="${unparsed_words[0]}"
    unset 'unparsed_words[0]'
    unparsed_words=("${unparsed_words[@]}")
    case "${subcommand}" in
    tokens|pin|puk|key|register|authenticate|deregister|accounts|authenticators|local|info|metadata|uaf|oob|pending|device|fido2|install-desktop|enroll|doctor|watch|serve|exit-codes|provision|help)
        # Offer subcommand argument completions
        "_tokenbridge_${subcommand}"
        ;;
    *)
        # Offer subcommand completions
        COMPREPLY+=($(compgen -W 'tokens pin puk key register authenticate deregister accounts authenticators local info metadata uaf oob pending device fido2 install-desktop enroll doctor watch serve exit-codes provision help' -- "${cur}"))
        ;;
    esac
}

_tokenbridge_tokens() {
    repeating_flags=()
    non_repeating_flags=(--wait --json --trace --yes --version -h --help)
    repeating_options=()
    non_repeating_options=(--token --pin-fd --timeout --prompt)
    __tokenbridge_offer_flags_options 0

    # Offer option value completions
    case "${prev}" in
    '--token')
        return
        ;;
    '--pin-fd')
        return
        ;;
    '--timeout')
        return
        ;;
    '--prompt')
        return
        ;;
    esac
}

_tokenbridge_pin() {
    repeating_flags=()
    non_repeating_flags=(--version -h --help)
    repeating_options=()
    non_repeating_options=()
    __tokenbridge_offer_flags_options 0

    # Offer subcommand / subcommand argument completions
    local -r subcommand="${unparsed_words[0]}"
    unset 'unparsed_words[0]'
    unparsed_words=("${unparsed_words[@]}")
    case "${subcommand}" in
    status|set|change|unblock)
        # Offer subcommand argument completions
        "_tokenbridge_pin_${subcommand}"
        ;;
    *)
        # Offer subcommand completions
        COMPREPLY+=($(compgen -W 'status set change unblock' -- "${cur}"))
        ;;
    esac
}

_tokenbridge_pin_status() {
    repeating_flags=()
    non_repeating_flags=(--wait --json --trace --yes --version -h --help)
    repeating_options=()
    non_repeating_options=(--token --pin-fd --timeout --prompt)
    __tokenbridge_offer_flags_options 0

    # Offer option value completions
    case "${prev}" in
    '--token')
        return
        ;;
    '--pin-fd')
        return
        ;;
    '--timeout')
        return
        ;;
    '--prompt')
        return
        ;;
    esac
}

_tokenbridge_pin_set() {
    repeating_flags=()
    non_repeating_flags=(--wait --json --trace --yes --version -h --help)
    repeating_options=()
    non_repeating_options=(--token --pin-fd --timeout --prompt)
    __tokenbridge_offer_flags_options 0

    # Offer option value completions
    case "${prev}" in
    '--token')
        return
        ;;
    '--pin-fd')
        return
        ;;
    '--timeout')
        return
        ;;
    '--prompt')
        return
        ;;
    esac
}

_tokenbridge_pin_change() {
    repeating_flags=()
    non_repeating_flags=(--wait --json --trace --yes --version -h --help)
    repeating_options=()
    non_repeating_options=(--token --pin-fd --timeout --prompt)
    __tokenbridge_offer_flags_options 0

    # Offer option value completions
    case "${prev}" in
    '--token')
        return
        ;;
    '--pin-fd')
        return
        ;;
    '--timeout')
        return
        ;;
    '--prompt')
        return
        ;;
    esac
}

_tokenbridge_pin_unblock() {
    repeating_flags=()
    non_repeating_flags=(--wait --json --trace --yes --version -h --help)
    repeating_options=()
    non_repeating_options=(--token --pin-fd --timeout --prompt)
    __tokenbridge_offer_flags_options 0

    # Offer option value completions
    case "${prev}" in
    '--token')
        return
        ;;
    '--pin-fd')
        return
        ;;
    '--timeout')
        return
        ;;
    '--prompt')
        return
        ;;
    esac
}

_tokenbridge_puk() {
    repeating_flags=()
    non_repeating_flags=(--version -h --help)
    repeating_options=()
    non_repeating_options=()
    __tokenbridge_offer_flags_options 0

    # Offer subcommand / subcommand argument completions
    local -r subcommand="${unparsed_words[0]}"
    unset 'unparsed_words[0]'
    unparsed_words=("${unparsed_words[@]}")
    case "${subcommand}" in
    change)
        # Offer subcommand argument completions
        "_tokenbridge_puk_${subcommand}"
        ;;
    *)
        # Offer subcommand completions
        COMPREPLY+=($(compgen -W 'change' -- "${cur}"))
        ;;
    esac
}

_tokenbridge_puk_change() {
    repeating_flags=()
    non_repeating_flags=(--wait --json --trace --yes --version -h --help)
    repeating_options=()
    non_repeating_options=(--token --pin-fd --timeout --prompt)
    __tokenbridge_offer_flags_options 0

    # Offer option value completions
    case "${prev}" in
    '--token')
        return
        ;;
    '--pin-fd')
        return
        ;;
    '--timeout')
        return
        ;;
    '--prompt')
        return
        ;;
    esac
}

_tokenbridge_key() {
    repeating_flags=()
    non_repeating_flags=(--version -h --help)
    repeating_options=()
    non_repeating_options=()
    __tokenbridge_offer_flags_options 0

    # Offer subcommand / subcommand argument completions
    local -r subcommand="${unparsed_words[0]}"
    unset 'unparsed_words[0]'
    unparsed_words=("${unparsed_words[@]}")
    case "${subcommand}" in
    generate|public|sign)
        # Offer subcommand argument completions
        "_tokenbridge_key_${subcommand}"
        ;;
    *)
        # Offer subcommand completions
        COMPREPLY+=($(compgen -W 'generate public sign' -- "${cur}"))
        ;;
    esac
}

_tokenbridge_key_generate() {
    repeating_flags=()
    non_repeating_flags=(--wait --json --trace --yes --pin-protected-management-key --force --version -h --help)
    repeating_options=()
    non_repeating_options=(--token --pin-fd --timeout --prompt --slot --management-key-fd)
    __tokenbridge_offer_flags_options 0

    # Offer option value completions
    case "${prev}" in
    '--token')
        return
        ;;
    '--pin-fd')
        return
        ;;
    '--timeout')
        return
        ;;
    '--prompt')
        return
        ;;
    '--slot')
        return
        ;;
    '--management-key-fd')
        return
        ;;
    esac
}

_tokenbridge_key_public() {
    repeating_flags=()
    non_repeating_flags=(--wait --json --trace --yes --version -h --help)
    repeating_options=()
    non_repeating_options=(--token --pin-fd --timeout --prompt --slot)
    __tokenbridge_offer_flags_options 0

    # Offer option value completions
    case "${prev}" in
    '--token')
        return
        ;;
    '--pin-fd')
        return
        ;;
    '--timeout')
        return
        ;;
    '--prompt')
        return
        ;;
    '--slot')
        return
        ;;
    esac
}

_tokenbridge_key_sign() {
    repeating_flags=()
    non_repeating_flags=(--wait --json --trace --yes --version -h --help)
    repeating_options=()
    non_repeating_options=(--token --pin-fd --timeout --prompt --slot --input --output)
    __tokenbridge_offer_flags_options 0

    # Offer option value completions
    case "${prev}" in
    '--token')
        return
        ;;
    '--pin-fd')
        return
        ;;
    '--timeout')
        return
        ;;
    '--prompt')
        return
        ;;
    '--slot')
        return
        ;;
    '--input')
        return
        ;;
    '--output')
        return
        ;;
    esac
}

_tokenbridge_register() {
    repeating_flags=()
    non_repeating_flags=(--wait --json --trace --yes --version -h --help)
    repeating_options=()
    non_repeating_options=(--token --pin-fd --timeout --prompt --server --facet-id --username)
    __tokenbridge_offer_flags_options 0

    # Offer option value completions
    case "${prev}" in
    '--token')
        return
        ;;
    '--pin-fd')
        return
        ;;
    '--timeout')
        return
        ;;
    '--prompt')
        return
        ;;
    '--server')
        return
        ;;
    '--facet-id')
        return
        ;;
    '--username')
        return
        ;;
    esac
}

_tokenbridge_authenticate() {
    repeating_flags=()
    non_repeating_flags=(--wait --json --trace --yes --version -h --help)
    repeating_options=()
    non_repeating_options=(--token --pin-fd --timeout --prompt --server --facet-id --username --transaction)
    __tokenbridge_offer_flags_options 0

    # Offer option value completions
    case "${prev}" in
    '--token')
        return
        ;;
    '--pin-fd')
        return
        ;;
    '--timeout')
        return
        ;;
    '--prompt')
        return
        ;;
    '--server')
        return
        ;;
    '--facet-id')
        return
        ;;
    '--username')
        return
        ;;
    '--transaction')
        return
        ;;
    esac
}

_tokenbridge_deregister() {
    repeating_flags=()
    non_repeating_flags=(--wait --json --trace --yes --version -h --help)
    repeating_options=()
    non_repeating_options=(--token --pin-fd --timeout --prompt --server --facet-id --username --key-id)
    __tokenbridge_offer_flags_options 0

    # Offer option value completions
    case "${prev}" in
    '--token')
        return
        ;;
    '--pin-fd')
        return
        ;;
    '--timeout')
        return
        ;;
    '--prompt')
        return
        ;;
    '--server')
        return
        ;;
    '--facet-id')
        return
        ;;
    '--username')
        return
        ;;
    '--key-id')
        return
        ;;
    esac
}

_tokenbridge_accounts() {
    repeating_flags=()
    non_repeating_flags=(--wait --json --trace --yes --version -h --help)
    repeating_options=()
    non_repeating_options=(--token --pin-fd --timeout --prompt)
    __tokenbridge_offer_flags_options 0

    # Offer option value completions
    case "${prev}" in
    '--token')
        return
        ;;
    '--pin-fd')
        return
        ;;
    '--timeout')
        return
        ;;
    '--prompt')
        return
        ;;
    esac
}

_tokenbridge_authenticators() {
    repeating_flags=()
    non_repeating_flags=(--wait --json --trace --yes --all --version -h --help)
    repeating_options=()
    non_repeating_options=(--token --pin-fd --timeout --prompt)
    __tokenbridge_offer_flags_options 0

    # Offer option value completions
    case "${prev}" in
    '--token')
        return
        ;;
    '--pin-fd')
        return
        ;;
    '--timeout')
        return
        ;;
    '--prompt')
        return
        ;;
    esac
}

_tokenbridge_local() {
    repeating_flags=()
    non_repeating_flags=(--version -h --help)
    repeating_options=()
    non_repeating_options=()
    __tokenbridge_offer_flags_options 0

    # Offer subcommand / subcommand argument completions
    local -r subcommand="${unparsed_words[0]}"
    unset 'unparsed_words[0]'
    unparsed_words=("${unparsed_words[@]}")
    case "${subcommand}" in
    delete)
        # Offer subcommand argument completions
        "_tokenbridge_local_${subcommand}"
        ;;
    *)
        # Offer subcommand completions
        COMPREPLY+=($(compgen -W 'delete' -- "${cur}"))
        ;;
    esac
}

_tokenbridge_local_delete() {
    repeating_flags=()
    non_repeating_flags=(--wait --json --trace --yes --version -h --help)
    repeating_options=()
    non_repeating_options=(--token --pin-fd --timeout --prompt)
    __tokenbridge_offer_flags_options 1

    # Offer option value completions
    case "${prev}" in
    '--token')
        return
        ;;
    '--pin-fd')
        return
        ;;
    '--timeout')
        return
        ;;
    '--prompt')
        return
        ;;
    esac
}

_tokenbridge_info() {
    repeating_flags=()
    non_repeating_flags=(--wait --json --trace --yes --version -h --help)
    repeating_options=()
    non_repeating_options=(--token --pin-fd --timeout --prompt --server --facet-id)
    __tokenbridge_offer_flags_options 0

    # Offer option value completions
    case "${prev}" in
    '--token')
        return
        ;;
    '--pin-fd')
        return
        ;;
    '--timeout')
        return
        ;;
    '--prompt')
        return
        ;;
    '--server')
        return
        ;;
    '--facet-id')
        return
        ;;
    esac
}

_tokenbridge_metadata() {
    repeating_flags=()
    non_repeating_flags=(--json --version -h --help)
    repeating_options=()
    non_repeating_options=(--schema --attestation-root)
    __tokenbridge_offer_flags_options 1

    # Offer option value completions
    case "${prev}" in
    '--schema')
        __tokenbridge_add_completions -W '3'$'\n''1.1'
        return
        ;;
    '--attestation-root')
        __tokenbridge_add_completions -f
        return
        ;;
    esac
}

_tokenbridge_uaf() {
    repeating_flags=()
    non_repeating_flags=(--version -h --help)
    repeating_options=()
    non_repeating_options=()
    __tokenbridge_offer_flags_options 0

    # Offer subcommand / subcommand argument completions
    local -r subcommand="${unparsed_words[0]}"
    unset 'unparsed_words[0]'
    unparsed_words=("${unparsed_words[@]}")
    case "${subcommand}" in
    discover|process)
        # Offer subcommand argument completions
        "_tokenbridge_uaf_${subcommand}"
        ;;
    *)
        # Offer subcommand completions
        COMPREPLY+=($(compgen -W 'discover process' -- "${cur}"))
        ;;
    esac
}

_tokenbridge_uaf_discover() {
    repeating_flags=()
    non_repeating_flags=(--wait --json --trace --yes --version -h --help)
    repeating_options=()
    non_repeating_options=(--token --pin-fd --timeout --prompt)
    __tokenbridge_offer_flags_options 0

    # Offer option value completions
    case "${prev}" in
    '--token')
        return
        ;;
    '--pin-fd')
        return
        ;;
    '--timeout')
        return
        ;;
    '--prompt')
        return
        ;;
    esac
}

_tokenbridge_uaf_process() {
    repeating_flags=()
    non_repeating_flags=(--wait --json --trace --yes --version -h --help)
    repeating_options=()
    non_repeating_options=(--token --pin-fd --timeout --prompt --facet-id --channel-binding)
    __tokenbridge_offer_flags_options 0

    # Offer option value completions
    case "${prev}" in
    '--token')
        return
        ;;
    '--pin-fd')
        return
        ;;
    '--timeout')
        return
        ;;
    '--prompt')
        return
        ;;
    '--facet-id')
        return
        ;;
    '--channel-binding')
        return
        ;;
    esac
}

_tokenbridge_oob() {
    repeating_flags=()
    non_repeating_flags=(--wait --json --trace --yes --decode-only --no-open --version -h --help)
    repeating_options=()
    non_repeating_options=(--token --pin-fd --timeout --prompt --qr-text --qr-image --push)
    __tokenbridge_offer_flags_options 1

    # Offer option value completions
    case "${prev}" in
    '--token')
        return
        ;;
    '--pin-fd')
        return
        ;;
    '--timeout')
        return
        ;;
    '--prompt')
        return
        ;;
    '--qr-text')
        return
        ;;
    '--qr-image')
        return
        ;;
    '--push')
        return
        ;;
    esac
}

_tokenbridge_pending() {
    repeating_flags=()
    non_repeating_flags=(--wait --json --trace --yes --no-open --version -h --help)
    repeating_options=()
    non_repeating_options=(--token --pin-fd --timeout --prompt --server --run)
    __tokenbridge_offer_flags_options 0

    # Offer option value completions
    case "${prev}" in
    '--token')
        return
        ;;
    '--pin-fd')
        return
        ;;
    '--timeout')
        return
        ;;
    '--prompt')
        return
        ;;
    '--server')
        return
        ;;
    '--run')
        return
        ;;
    esac
}

_tokenbridge_device() {
    repeating_flags=()
    non_repeating_flags=(--version -h --help)
    repeating_options=()
    non_repeating_options=()
    __tokenbridge_offer_flags_options 0

    # Offer subcommand / subcommand argument completions
    local -r subcommand="${unparsed_words[0]}"
    unset 'unparsed_words[0]'
    unparsed_words=("${unparsed_words[@]}")
    case "${subcommand}" in
    change|check|sync)
        # Offer subcommand argument completions
        "_tokenbridge_device_${subcommand}"
        ;;
    *)
        # Offer subcommand completions
        COMPREPLY+=($(compgen -W 'change check sync' -- "${cur}"))
        ;;
    esac
}

_tokenbridge_device_change() {
    repeating_flags=()
    non_repeating_flags=(--wait --json --trace --yes --disable-push --version -h --help)
    repeating_options=()
    non_repeating_options=(--token --pin-fd --timeout --prompt --name --push-token)
    __tokenbridge_offer_flags_options 0

    # Offer option value completions
    case "${prev}" in
    '--token')
        return
        ;;
    '--pin-fd')
        return
        ;;
    '--timeout')
        return
        ;;
    '--prompt')
        return
        ;;
    '--name')
        return
        ;;
    '--push-token')
        return
        ;;
    esac
}

_tokenbridge_device_check() {
    repeating_flags=()
    non_repeating_flags=(--wait --json --trace --yes --version -h --help)
    repeating_options=()
    non_repeating_options=(--token --pin-fd --timeout --prompt --server)
    __tokenbridge_offer_flags_options 0

    # Offer option value completions
    case "${prev}" in
    '--token')
        return
        ;;
    '--pin-fd')
        return
        ;;
    '--timeout')
        return
        ;;
    '--prompt')
        return
        ;;
    '--server')
        return
        ;;
    esac
}

_tokenbridge_device_sync() {
    repeating_flags=()
    non_repeating_flags=(--wait --json --trace --yes --version -h --help)
    repeating_options=()
    non_repeating_options=(--token --pin-fd --timeout --prompt --server)
    __tokenbridge_offer_flags_options 0

    # Offer option value completions
    case "${prev}" in
    '--token')
        return
        ;;
    '--pin-fd')
        return
        ;;
    '--timeout')
        return
        ;;
    '--prompt')
        return
        ;;
    '--server')
        return
        ;;
    esac
}

_tokenbridge_fido2() {
    repeating_flags=()
    non_repeating_flags=(--version -h --help)
    repeating_options=()
    non_repeating_options=()
    __tokenbridge_offer_flags_options 0

    # Offer subcommand / subcommand argument completions
    local -r subcommand="${unparsed_words[0]}"
    unset 'unparsed_words[0]'
    unparsed_words=("${unparsed_words[@]}")
    case "${subcommand}" in
    info|credentials|reset)
        # Offer subcommand argument completions
        "_tokenbridge_fido2_${subcommand}"
        ;;
    *)
        # Offer subcommand completions
        COMPREPLY+=($(compgen -W 'info credentials reset' -- "${cur}"))
        ;;
    esac
}

_tokenbridge_fido2_info() {
    repeating_flags=()
    non_repeating_flags=(--wait --json --trace --yes --version -h --help)
    repeating_options=()
    non_repeating_options=(--token --pin-fd --timeout --prompt)
    __tokenbridge_offer_flags_options 0

    # Offer option value completions
    case "${prev}" in
    '--token')
        return
        ;;
    '--pin-fd')
        return
        ;;
    '--timeout')
        return
        ;;
    '--prompt')
        return
        ;;
    esac
}

_tokenbridge_fido2_credentials() {
    repeating_flags=()
    non_repeating_flags=(--version -h --help)
    repeating_options=()
    non_repeating_options=()
    __tokenbridge_offer_flags_options 0

    # Offer subcommand / subcommand argument completions
    local -r subcommand="${unparsed_words[0]}"
    unset 'unparsed_words[0]'
    unparsed_words=("${unparsed_words[@]}")
    case "${subcommand}" in
    list|delete)
        # Offer subcommand argument completions
        "_tokenbridge_fido2_credentials_${subcommand}"
        ;;
    *)
        # Offer subcommand completions
        COMPREPLY+=($(compgen -W 'list delete' -- "${cur}"))
        ;;
    esac
}

_tokenbridge_fido2_credentials_list() {
    repeating_flags=()
    non_repeating_flags=(--wait --json --trace --yes --version -h --help)
    repeating_options=()
    non_repeating_options=(--token --pin-fd --timeout --prompt)
    __tokenbridge_offer_flags_options 0

    # Offer option value completions
    case "${prev}" in
    '--token')
        return
        ;;
    '--pin-fd')
        return
        ;;
    '--timeout')
        return
        ;;
    '--prompt')
        return
        ;;
    esac
}

_tokenbridge_fido2_credentials_delete() {
    repeating_flags=()
    non_repeating_flags=(--wait --json --trace --yes --version -h --help)
    repeating_options=()
    non_repeating_options=(--token --pin-fd --timeout --prompt)
    __tokenbridge_offer_flags_options 1

    # Offer option value completions
    case "${prev}" in
    '--token')
        return
        ;;
    '--pin-fd')
        return
        ;;
    '--timeout')
        return
        ;;
    '--prompt')
        return
        ;;
    esac
}

_tokenbridge_fido2_reset() {
    repeating_flags=()
    non_repeating_flags=(--wait --json --trace --yes --version -h --help)
    repeating_options=()
    non_repeating_options=(--token --pin-fd --timeout --prompt)
    __tokenbridge_offer_flags_options 0

    # Offer option value completions
    case "${prev}" in
    '--token')
        return
        ;;
    '--pin-fd')
        return
        ;;
    '--timeout')
        return
        ;;
    '--prompt')
        return
        ;;
    esac
}

_tokenbridge_install-desktop() {
    repeating_flags=()
    non_repeating_flags=(--print --version -h --help)
    repeating_options=()
    non_repeating_options=(--executable)
    __tokenbridge_offer_flags_options 0

    # Offer option value completions
    case "${prev}" in
    '--executable')
        return
        ;;
    esac
}

_tokenbridge_enroll() {
    repeating_flags=()
    non_repeating_flags=(--wait --json --trace --yes --version -h --help)
    repeating_options=()
    non_repeating_options=(--token --pin-fd --timeout --prompt --device --reset)
    __tokenbridge_offer_flags_options 0

    # Offer option value completions
    case "${prev}" in
    '--token')
        return
        ;;
    '--pin-fd')
        return
        ;;
    '--timeout')
        return
        ;;
    '--prompt')
        return
        ;;
    '--device')
        return
        ;;
    '--reset')
        return
        ;;
    esac
}

_tokenbridge_doctor() {
    repeating_flags=()
    non_repeating_flags=(--json --version -h --help)
    repeating_options=()
    non_repeating_options=()
    __tokenbridge_offer_flags_options 0
}

_tokenbridge_watch() {
    repeating_flags=()
    non_repeating_flags=(--json --version -h --help)
    repeating_options=()
    non_repeating_options=()
    __tokenbridge_offer_flags_options 0
}

_tokenbridge_serve() {
    repeating_flags=()
    non_repeating_flags=(--version -h --help)
    repeating_options=()
    non_repeating_options=(--idle-timeout --address)
    __tokenbridge_offer_flags_options 0

    # Offer option value completions
    case "${prev}" in
    '--idle-timeout')
        return
        ;;
    '--address')
        return
        ;;
    esac
}

_tokenbridge_exit-codes() {
    repeating_flags=()
    non_repeating_flags=(--version -h --help)
    repeating_options=()
    non_repeating_options=()
    __tokenbridge_offer_flags_options 0
}

_tokenbridge_provision() {
    repeating_flags=()
    non_repeating_flags=(--wait --json --trace --yes --version -h --help)
    repeating_options=()
    non_repeating_options=(--token --pin-fd --timeout --prompt --server --facet-id --plan --journal --report --csv --pin-recipient --parallel)
    __tokenbridge_offer_flags_options 0

    # Offer option value completions
    case "${prev}" in
    '--token')
        return
        ;;
    '--pin-fd')
        return
        ;;
    '--timeout')
        return
        ;;
    '--prompt')
        return
        ;;
    '--server')
        return
        ;;
    '--facet-id')
        return
        ;;
    '--plan')
        return
        ;;
    '--journal')
        return
        ;;
    '--report')
        return
        ;;
    '--csv')
        return
        ;;
    '--pin-recipient')
        return
        ;;
    '--parallel')
        return
        ;;
    esac
}

_tokenbridge_help() {
    repeating_flags=()
    non_repeating_flags=(--version)
    repeating_options=()
    non_repeating_options=()
    __tokenbridge_offer_flags_options -1
}

complete -o filenames -F _tokenbridge tokenbridge
