package nccl

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The FAKE libcuda (selftest/gpufake) emulates pb_rank_fill and pb_sum_verify by
// calling Value and Expected, so on the FAKE the Go functions always agree with
// themselves. On a GPU the PTX runs instead: if Value drifted from what
// pb_rank_fill stores, every element would be counted wrong there and nowhere else.
// This test runs the two kernels' PTX through a small interpreter of the
// instructions they use, one thread after the other, and holds them to Value and
// Expected.

// ptxThread is the state of one thread: registers (predicates as 0 or 1) and the
// special registers of its place in the grid.
type ptxThread struct {
	reg     map[string]uint64
	special map[string]uint64
}

var ptxEntry = regexp.MustCompile(`(?s)\.entry (\w+)\(\s*(.*?)\)\s*\{(.*?)\n\}`)

// runPTX runs entry of src on a grid of grid x block threads, one after the other,
// over mem (32-bit words by byte address).
func runPTX(t *testing.T, src, entry string, grid, block uint64, args []uint64, mem map[uint64]uint32) {
	t.Helper()
	params := map[string]uint64{} // parameter name -> argument
	var body string
	for _, m := range ptxEntry.FindAllStringSubmatch(src, -1) {
		if decl := strings.Split(m[2], ","); m[1] == entry && len(decl) == len(args) {
			for i, p := range decl {
				f := strings.Fields(p)
				params[f[len(f)-1]] = args[i]
			}
			body = m[3]
		}
	}
	if body == "" {
		t.Fatalf("no entry %s with %d parameters", entry, len(args))
	}
	var code [][]string // instructions: [predicate, opcode, operands...]
	labels := map[string]int{}
	for _, line := range strings.Split(body, "\n") {
		line, _, _ = strings.Cut(line, "//")
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, ".reg"):
		case strings.HasSuffix(line, ":"):
			labels[strings.TrimSuffix(line, ":")] = len(code)
		default:
			pred := ""
			if strings.HasPrefix(line, "@") {
				pred, line, _ = strings.Cut(line[1:], " ")
			}
			op, rest, _ := strings.Cut(strings.TrimSuffix(line, ";"), " ")
			ins := []string{pred, op}
			for _, a := range strings.Split(rest, ",") {
				if a = strings.TrimSpace(a); a != "" {
					ins = append(ins, a)
				}
			}
			code = append(code, ins)
		}
	}
	const m32 = 1<<32 - 1
	thread := func(b, th uint64) {
		st := ptxThread{reg: map[string]uint64{}, special: map[string]uint64{
			"%ctaid.x": b, "%ntid.x": block, "%tid.x": th, "%nctaid.x": grid}}
		val := func(a string) uint64 {
			if v, ok := st.special[a]; ok {
				return v
			}
			if strings.HasPrefix(a, "%") {
				v, ok := st.reg[a]
				if !ok {
					t.Fatalf("%s: register %s read before it is written", entry, a)
				}
				return v
			}
			v, err := strconv.ParseInt(a, 0, 64)
			if err != nil {
				t.Fatalf("%s: operand %q", entry, a)
			}
			return uint64(v)
		}
		addr := func(a string) uint64 { return val(strings.Trim(a, "[]")) }
		for pc, steps := 0, 0; ; steps++ {
			if pc >= len(code) || steps > 1e6 {
				t.Fatalf("%s: ran off the code or looped (pc %d, %d steps)", entry, pc, steps)
			}
			ins := code[pc]
			pc++
			if ins[0] != "" && val(ins[0]) == 0 {
				continue
			}
			op, a := ins[1], ins[2:]
			set := func(v uint64) { st.reg[a[0]] = v }
			switch op {
			case "ld.param.u64", "ld.param.u32":
				v, ok := params[strings.Trim(a[1], "[]")]
				if !ok {
					t.Fatalf("%s: no parameter %s", entry, a[1])
				}
				if op == "ld.param.u32" {
					v &= m32
				}
				set(v)
			case "cvta.to.global.u64":
				set(val(a[1]))
			case "mov.u32", "cvt.u64.u32", "cvt.u32.u64":
				set(val(a[1]) & m32)
			case "mul.lo.u32":
				set(val(a[1]) * val(a[2]) & m32)
			case "mul.wide.u32":
				set((val(a[1]) & m32) * (val(a[2]) & m32))
			case "add.u64", "add.s64":
				set(val(a[1]) + val(a[2]))
			case "add.u32", "add.s32":
				set((val(a[1]) + val(a[2])) & m32)
			case "sub.s32":
				set((val(a[1]) - val(a[2])) & m32)
			case "shr.u32":
				set((val(a[1]) & m32) >> val(a[2]))
			case "shl.b64":
				set(val(a[1]) << val(a[2]))
			case "setp.ge.u64", "setp.lt.u64", "setp.ge.u32", "setp.eq.u32":
				x, y := val(a[1]), val(a[2])
				if strings.HasSuffix(op, ".u32") {
					x, y = x&m32, y&m32
				}
				r := map[string]bool{"ge": x >= y, "lt": x < y, "eq": x == y}[strings.Split(op, ".")[1]]
				set(map[bool]uint64{false: 0, true: 1}[r])
			case "bra":
				to, ok := labels[a[0]]
				if !ok {
					t.Fatalf("%s: no label %s", entry, a[0])
				}
				pc = to
			case "st.global.u32":
				mem[addr(a[0])] = uint32(val(a[1]))
			case "ld.global.u32":
				set(uint64(mem[addr(a[1])]))
			case "atom.global.add.u64":
				p := addr(a[1])
				old := uint64(mem[p]) | uint64(mem[p+4])<<32
				n := old + val(a[2])
				mem[p], mem[p+4] = uint32(n), uint32(n>>32)
				set(old)
			case "ret":
				return
			default:
				t.Fatalf("%s: the test's interpreter has no %s (extend it with the kernel)", entry, op)
			}
		}
	}
	for b := uint64(0); b < grid; b++ {
		for th := uint64(0); th < block; th++ {
			thread(b, th)
		}
	}
}

func TestReducePTXComputesValueAndExpected(t *testing.T) {
	const ptr, result, n = 0x10000, 0x90000, 1000
	for ranks := 1; ranks <= 4; ranks++ {
		// pb_rank_fill stores Value(rank, i) at every element below n, nothing above.
		for r := 0; r < ranks; r++ {
			mem := map[uint64]uint32{}
			runPTX(t, reducePTX, "pb_rank_fill", 3, 32, []uint64{ptr, n, uint64(r)}, mem)
			for i := uint64(0); i < n; i++ {
				if got := int32(mem[ptr+4*i]); got != Value(r, i) {
					t.Fatalf("pb_rank_fill: rank %d element %d = %d, Value says %d", r, i, got, Value(r, i))
				}
			}
			if len(mem) != n {
				t.Errorf("pb_rank_fill wrote %d words, want %d", len(mem), n)
			}
		}
		// pb_sum_verify counts the elements that are not Expected(i, ranks).
		mem := map[uint64]uint32{}
		for i := uint64(0); i < n; i++ {
			mem[ptr+4*i] = uint32(Expected(i, ranks))
		}
		bad := []uint64{0, 1, 255, 256, 500, n - 1}
		for _, i := range bad {
			mem[ptr+4*i]++
		}
		runPTX(t, reducePTX, "pb_sum_verify", 3, 32, []uint64{ptr, n, uint64(ranks), result}, mem)
		if got := uint64(mem[result]) | uint64(mem[result+4])<<32; got != uint64(len(bad)) {
			t.Errorf("pb_sum_verify over %d ranks counted %d wrong elements, want %d", ranks, got, len(bad))
		}
	}
}
