# lib.sh: the checks of scripts/device/*.sh (sourced). Every check prints one line,
# "check NAME: ok ..." or "check NAME: FAIL ...", and `summary` prints the one-line
# result and returns non-zero when any check failed or none ran:
#   device: 7/7 checks passed
#   device: FAIL 2/7: sm-vs-ce, corrupt-exit-9
n_checks=0
n_failed=0
failed=

# result NAME ok|FAIL [DETAIL...]
result() {
	_name=$1 _st=$2
	shift 2
	n_checks=$((n_checks + 1))
	if [ "$_st" = ok ]; then
		echo "check $_name: ok $*"
	else
		echo "check $_name: FAIL $*"
		n_failed=$((n_failed + 1))
		failed="$failed${failed:+, }$_name"
	fi
}

# check NAME CMD...: ok when CMD exits 0.
check() {
	_cname=$1
	shift
	if "$@"; then
		result "$_cname" ok
	else
		result "$_cname" FAIL "(exit $?: $*)"
	fi
}

# results FILE: one result per line "ok|FAIL NAME DETAIL..." (what compare_*.py
# print); a missing or empty file is a failed check of its own.
results() {
	if [ ! -s "$1" ]; then
		result "$(basename "$1")" FAIL "no comparison results"
		return
	fi
	while read -r _st _name _rest; do
		result "$_name" "$_st" "$_rest"
	done <"$1"
}

summary() {
	if [ "$n_failed" -eq 0 ] && [ "$n_checks" -gt 0 ]; then
		echo "device: $n_checks/$n_checks checks passed"
		return 0
	fi
	echo "device: FAIL $n_failed/$n_checks: ${failed:-no checks ran}"
	return 1
}
