#!/usr/bin/env bash
# expect_error.sh REGEX COMMAND...: runs COMMAND (20 s at most) and passes when it exits with
# code 1, exactly one line of its stderr mentions an error, and that line is the last one and
# matches the extended regular expression REGEX. Progress lines before it are allowed (bench
# prints them); stdout is ignored.
set -u
regex=$1
shift
command_line="$*"
err=$(mktemp)
usage=$(mktemp)
trap 'rm -f "$err" "$usage"' EXIT
# Wall time and peak RSS are reported (not judged) when /usr/bin/time is there.
measure=()
[ -x /usr/bin/time ] && measure=(/usr/bin/time -o "$usage" -f "%e s, %M KB max RSS")
timeout 20 "${measure[@]}" "$@" > /dev/null 2> "$err"
code=$?
fail() {
  echo "FAIL: $1"
  echo "command: $command_line"
  echo "--- stderr:"
  head -c 2000 "$err"
  exit 1
}
[ "$code" -eq 1 ] || fail "exit code $code, expected 1 (124: timed out)"
[ "$(grep -ci error "$err")" -eq 1 ] || fail "expected exactly one error line"
last=$(tail -n 1 "$err")
printf '%s\n' "$last" | grep -Eq -- "$regex" || fail "the last stderr line does not match /$regex/"
[ "${#last}" -le 2000 ] || fail "the error line is ${#last} characters long"
echo "ok: $last [$(tail -n 1 "$usage" 2> /dev/null)]"
