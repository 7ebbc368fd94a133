package sign

import (
	"encoding/binary"
)

// minimalPE builds a tiny valid PE32+ EFI application (one .text section of
// 0x200 bytes, seeded so different seeds give different images) for sbsign.
func minimalPE(seed byte) []byte {
	b := make([]byte, 0x400)
	le := binary.LittleEndian
	b[0], b[1] = 'M', 'Z'
	le.PutUint32(b[0x3c:], 0x40)
	copy(b[0x40:], "PE\x00\x00")
	coff := 0x44
	le.PutUint16(b[coff:], 0x8664) // x86-64
	le.PutUint16(b[coff+2:], 1)    // one section
	le.PutUint16(b[coff+16:], 240) // optional header size
	le.PutUint16(b[coff+18:], 0x0022)
	o := coff + 20
	le.PutUint16(b[o:], 0x20b)
	le.PutUint32(b[o+4:], 0x200)       // SizeOfCode
	le.PutUint32(b[o+16:], 0x1000)     // AddressOfEntryPoint
	le.PutUint32(b[o+20:], 0x1000)     // BaseOfCode
	le.PutUint64(b[o+24:], 0x10000000) // ImageBase
	le.PutUint32(b[o+32:], 0x1000)     // SectionAlignment
	le.PutUint32(b[o+36:], 0x200)      // FileAlignment
	le.PutUint32(b[o+56:], 0x2000)     // SizeOfImage
	le.PutUint32(b[o+60:], 0x200)      // SizeOfHeaders
	le.PutUint16(b[o+68:], 10)         // EFI application
	le.PutUint64(b[o+72:], 0x100000)   // stack reserve
	le.PutUint64(b[o+80:], 0x1000)     // stack commit
	le.PutUint64(b[o+88:], 0x100000)   // heap reserve
	le.PutUint64(b[o+96:], 0x1000)     // heap commit
	le.PutUint32(b[o+108:], 16)        // NumberOfRvaAndSizes
	s := o + 240
	copy(b[s:], ".text")
	le.PutUint32(b[s+8:], 0x200)
	le.PutUint32(b[s+12:], 0x1000)
	le.PutUint32(b[s+16:], 0x200)
	le.PutUint32(b[s+20:], 0x200)
	le.PutUint32(b[s+36:], 0x60000020)
	b[0x200] = 0xc3 // ret
	for i := 0x201; i < 0x400; i++ {
		b[i] = byte(i) ^ seed
	}
	return b
}

// ukiStub is minimalPE with room in its headers for a UKI's six section
// headers: a stub image.WriteUKI can add sections to.
func ukiStub() []byte {
	pe := minimalPE(9)
	stub := make([]byte, 0x600)
	copy(stub, pe[:0x200])
	copy(stub[0x400:], pe[0x200:])
	le := binary.LittleEndian
	le.PutUint32(stub[0x44+20+60:], 0x400)     // SizeOfHeaders
	le.PutUint32(stub[0x44+20+240+20:], 0x400) // .text PointerToRawData
	return stub
}
