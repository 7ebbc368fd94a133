package nvrun

// cksum is POSIX cksum(1)'s CRC: CRC-32 with polynomial 0x04C11DB7, most
// significant bit first, over the data and then its length (least significant
// byte first, only as many bytes as it takes), inverted. makeself's CRCsum is
// this value. hash/crc32 computes only the bit-reflected form, hence this.
type cksum struct {
	crc uint32
	n   uint64
}

var cksumTable = func() (t [256]uint32) {
	for i := range t {
		c := uint32(i) << 24
		for range 8 {
			if c&0x80000000 != 0 {
				c = c<<1 ^ 0x04C11DB7
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()

func (c *cksum) Write(p []byte) (int, error) {
	crc := c.crc
	for _, b := range p {
		crc = crc<<8 ^ cksumTable[byte(crc>>24)^b]
	}
	c.crc = crc
	c.n += uint64(len(p))
	return len(p), nil
}

func (c *cksum) Sum32() uint32 {
	crc := c.crc
	for n := c.n; n != 0; n >>= 8 {
		crc = crc<<8 ^ cksumTable[byte(crc>>24)^byte(n)]
	}
	return ^crc
}
