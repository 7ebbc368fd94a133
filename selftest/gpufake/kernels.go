package gpufake

import (
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/peerboot/peerboot/selftest/cuda"
	"github.com/peerboot/peerboot/selftest/nccl"
)

// The PTX is not compiled: cuModuleLoadDataEx reads the text's .entry declarations and
// their parameter types, and cuLaunchKernel runs the Go emulation registered for the
// entry's name. An emulation states the parameter types it was written for; a PTX
// entry whose parameters differ fails to load (CUDA_ERROR_INVALID_PTX with a FAKE JIT
// log), so a kernel that changes shape cannot run against a stale emulation.

type module struct {
	gpu     int
	entries map[string][]string // entry -> parameter types (".u64", ".u32")
}

type function struct {
	gpu    int
	name   string
	params []string
	emu    *emulation
}

type emulation struct {
	params []string
	// run does the kernel's work on GPU g; grid and block are the launch shape.
	run func(b *FakeBox, g int, st *stream, args []uint64) int32
}

var (
	entryRe = regexp.MustCompile(`\.entry\s+([A-Za-z_$][\w$]*)\s*\(([^)]*)\)`)
	paramRe = regexp.MustCompile(`\.param\s+(\.[a-z]\d+)\s+[\w$]+`)
)

// parsePTX lists the entries of a PTX text.
func parsePTX(text string) (map[string][]string, error) {
	if !strings.Contains(text, ".version") || !strings.Contains(text, ".target") {
		return nil, fmt.Errorf("FAKE ptxas: no .version / .target directive")
	}
	out := map[string][]string{}
	for _, m := range entryRe.FindAllStringSubmatch(text, -1) {
		var ps []string
		for _, p := range paramRe.FindAllStringSubmatch(m[2], -1) {
			ps = append(ps, p[1])
		}
		out[m[1]] = ps
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("FAKE ptxas: no .entry in the module")
	}
	return out, nil
}

// writeLog copies text into the JIT error log buffer given by the option values.
func writeLog(n uint32, opts *int32, vals *uintptr, text string) {
	if n == 0 || opts == nil || vals == nil {
		return
	}
	os := unsafe.Slice(opts, int(n))
	vs := unsafe.Slice(vals, int(n))
	var buf uintptr
	var size, sizeAt = uintptr(0), -1
	for i, o := range os {
		switch o {
		case 5: // CU_JIT_ERROR_LOG_BUFFER
			buf = vs[i]
		case 6: // CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES
			size, sizeAt = vs[i], i
		}
	}
	if buf == 0 || size == 0 {
		return
	}
	// The buffer is the caller's pinned memory, passed as an integer like the C API.
	dst := unsafe.Slice((*byte)(*(*unsafe.Pointer)(unsafe.Pointer(&buf))), int(size))
	k := copy(dst[:size-1], text)
	dst[k] = 0
	if sizeAt >= 0 {
		vs[sizeAt] = uintptr(k)
	}
}

func cString(p *byte) string {
	var sb strings.Builder
	for q := unsafe.Pointer(p); *(*byte)(q) != 0; q = unsafe.Add(q, 1) {
		sb.WriteByte(*(*byte)(q))
	}
	return sb.String()
}

func (b *FakeBox) cuModuleLoadDataEx(m *uintptr, image *byte, n uint32, opts *int32, vals *uintptr) int32 {
	g, rc := b.cur("cuModuleLoadDataEx")
	if rc != 0 {
		writeLog(n, opts, vals, b.cfg.PTXLog)
		return rc
	}
	entries, err := parsePTX(cString(image))
	if err == nil {
		for name, ps := range entries {
			if e, ok := emulations[name]; ok && strings.Join(e.params, ",") != strings.Join(ps, ",") {
				err = fmt.Errorf("FAKE ptxas: entry %s has parameters (%s), the FAKE emulation is written for (%s)",
					name, strings.Join(ps, ", "), strings.Join(e.params, ", "))
				break
			}
		}
	}
	if err != nil {
		writeLog(n, opts, vals, err.Error())
		return cudaErrorInvalidPTX
	}
	h := b.newHandle()
	b.modules[h] = &module{gpu: g, entries: entries}
	*m = h
	return 0
}

func (b *FakeBox) cuModuleGetFunction(f *uintptr, m uintptr, name *byte) int32 {
	if _, rc := b.cur("cuModuleGetFunction"); rc != 0 {
		return rc
	}
	mod, ok := b.modules[m]
	if !ok {
		return cudaErrorInvalidHandle
	}
	n := cString(name)
	ps, ok := mod.entries[n]
	if !ok {
		return cudaErrorNotFound
	}
	h := b.newHandle()
	b.funcs[h] = &function{gpu: mod.gpu, name: n, params: ps, emu: emulations[n]}
	*f = h
	return 0
}

// cuModuleUnload unloads a module "from the current context" (the driver API's
// words): a module of another GPU's context is CUDA_ERROR_INVALID_CONTEXT, so a
// caller that forgot to make the module's context current finds out here.
func (b *FakeBox) cuModuleUnload(m uintptr) int32 {
	g, rc := b.cur("cuModuleUnload")
	if rc != 0 {
		return rc
	}
	mod, ok := b.modules[m]
	if !ok {
		return cudaErrorInvalidHandle
	}
	if mod.gpu != g {
		return cudaErrorInvalidContext
	}
	delete(b.modules, m)
	return 0
}

func (b *FakeBox) cuLaunchKernel(f uintptr, gx, gy, gz, bx, by, bz, shmem uint32, s cuda.Stream, params *unsafe.Pointer, extra *unsafe.Pointer) int32 {
	st, rc := b.streamFor("cuLaunchKernel", s)
	if rc != 0 {
		return rc
	}
	fn, ok := b.funcs[f]
	if !ok {
		return cudaErrorInvalidHandle
	}
	if fn.gpu != st.gpu {
		return cudaErrorInvalidContext
	}
	if gx == 0 || bx == 0 || gy != 1 || gz != 1 || by != 1 || bz != 1 || bx > 1024 {
		return cudaErrorInvalidValue
	}
	if fn.emu == nil {
		// A kernel the stand-in cannot emulate: tell the test, the way a real launch
		// of a kernel with a bug fails.
		return cudaErrorLaunchFailed
	}
	// The driver copies the parameter values at launch.
	args := make([]uint64, len(fn.params))
	if len(args) > 0 {
		ptrs := unsafe.Slice(params, len(args))
		for i, t := range fn.params {
			switch t {
			case ".u64", ".s64", ".b64":
				args[i] = *(*uint64)(ptrs[i])
			default:
				args[i] = uint64(*(*uint32)(ptrs[i]))
			}
		}
	}
	b.Launches[fn.name]++
	b.Grids[fn.name] = gx
	g := st.gpu
	st.ops = append(st.ops, func() int32 { return fn.emu.run(b, g, st, args) })
	return 0
}

// words checks that a kernel on GPU g may touch n words at p.
func (b *FakeBox) words(g int, p, n uint64) int32 {
	if n == 0 {
		return 0
	}
	if !b.accessible(g, p) || !b.accessible(g, p+4*n-1) || b.faulted(FaultMMU, g, p) != nil {
		return cudaErrorIllegalAddress
	}
	if b.span(b.peerTarget(g, p), 4) == nil {
		return cudaErrorIllegalAddress
	}
	return 0
}

func (b *FakeBox) kernelTime(st *stream, bytes uint64) {
	st.clock += float64(bytes) / (b.cfg.LocalGBps * 1e9)
}

// emulations are the Go versions of selftest/cuda's and selftest/nccl's PTX kernels.
var emulations = map[string]*emulation{
	// pb_fill(ptr, nWords, seed): ptr[i] = Pattern(i, seed)
	"pb_fill": {params: []string{".u64", ".u64", ".u32"}, run: func(b *FakeBox, g int, st *stream, a []uint64) int32 {
		if rc := b.words(g, a[0], a[1]); rc != 0 {
			return rc
		}
		for i := uint64(0); i < a[1]; i++ {
			b.writeWord(g, a[0]+4*i, cuda.Pattern(i, uint32(a[2])))
		}
		b.kernelTime(st, 4*a[1])
		return 0
	}},
	// pb_verify(ptr, nWords, seed, result): result[0] += mismatches, result[1] = min bad index
	"pb_verify": {params: []string{".u64", ".u64", ".u32", ".u64"}, run: func(b *FakeBox, g int, st *stream, a []uint64) int32 {
		if rc := b.words(g, a[0], a[1]); rc != 0 {
			return rc
		}
		if rc := b.words(g, a[3], 4); rc != 0 {
			return rc
		}
		var wrong, first uint64 = 0, ^uint64(0)
		for i := uint64(0); i < a[1]; i++ {
			if b.readWord(g, a[0]+4*i) != cuda.Pattern(i, uint32(a[2])) {
				wrong++
				first = min(first, i)
			}
		}
		cnt := uint64(b.readWord(g, a[3])) | uint64(b.readWord(g, a[3]+4))<<32
		cnt += wrong
		old := uint64(b.readWord(g, a[3]+8)) | uint64(b.readWord(g, a[3]+12))<<32
		first = min(first, old)
		b.writeWord(g, a[3], uint32(cnt))
		b.writeWord(g, a[3]+4, uint32(cnt>>32))
		b.writeWord(g, a[3]+8, uint32(first))
		b.writeWord(g, a[3]+12, uint32(first>>32))
		b.kernelTime(st, 4*a[1])
		return 0
	}},
	// pb_copy_v4(dst, src, nVec): 16-byte vectors from src to dst, issued on GPU g's SMs
	"pb_copy_v4": {params: []string{".u64", ".u64", ".u64"}, run: func(b *FakeBox, g int, st *stream, a []uint64) int32 {
		dt, rc := b.copyBytes(g, a[0], a[1], 16*a[2], true)
		st.clock += dt
		return rc
	}},
	// pb_spin(hostFlag, timeoutClocks): waits for word 0 of the mapped host flag; a
	// flag still 0 when the stream runs is a timeout, marked in word 1.
	"pb_spin": {params: []string{".u64", ".u64"}, run: func(b *FakeBox, g int, st *stream, a []uint64) int32 {
		h := b.hostAt(a[0])
		if h == nil || a[0]+8 > h.addr()+uint64(len(h.b)) {
			return cudaErrorIllegalAddress
		}
		w := (*[2]uint32)(unsafe.Pointer(&h.b[a[0]-h.addr()]))
		b.SpinClocks[g] = a[1]
		if atomic.LoadUint32(&w[0]) == 0 {
			atomic.StoreUint32(&w[1], 1)
		}
		return 0
	}},
	// pb_rank_fill(ptr, n, rank): ptr[i] = Value(rank, i)
	"pb_rank_fill": {params: []string{".u64", ".u64", ".u32"}, run: func(b *FakeBox, g int, st *stream, a []uint64) int32 {
		if rc := b.words(g, a[0], a[1]); rc != 0 {
			return rc
		}
		for i := uint64(0); i < a[1]; i++ {
			b.writeWord(g, a[0]+4*i, uint32(nccl.Value(int(uint32(a[2])), i)))
		}
		b.kernelTime(st, 4*a[1])
		return 0
	}},
	// pb_sum_verify(ptr, n, nranks, result): result[0] += elements that are not the sum
	"pb_sum_verify": {params: []string{".u64", ".u64", ".u32", ".u64"}, run: func(b *FakeBox, g int, st *stream, a []uint64) int32 {
		if rc := b.words(g, a[0], a[1]); rc != 0 {
			return rc
		}
		if rc := b.words(g, a[3], 2); rc != 0 {
			return rc
		}
		var wrong uint64
		for i := uint64(0); i < a[1]; i++ {
			if int32(b.readWord(g, a[0]+4*i)) != nccl.Expected(i, int(uint32(a[2]))) {
				wrong++
			}
		}
		cnt := uint64(b.readWord(g, a[3])) | uint64(b.readWord(g, a[3]+4))<<32
		cnt += wrong
		b.writeWord(g, a[3], uint32(cnt))
		b.writeWord(g, a[3]+4, uint32(cnt>>32))
		b.kernelTime(st, 4*a[1])
		return 0
	}},
}
