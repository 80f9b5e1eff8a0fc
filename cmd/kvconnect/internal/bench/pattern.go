package bench

import "encoding/binary"

// The verification pattern is a function of the seed and the byte offset
// in the buffer: the 8-byte word at offset 8i holds splitmix64's finaliser
// of seed ^ i*golden, little-endian. It differs for every word and seed,
// does not depend on the block size, and is cheap to regenerate on the side
// that checks.

const golden = 0x9e3779b97f4a7c15

// readSalt makes the pattern a target fills its buffer with (for READ
// runs) differ from the one an initiator writes with the same seed, so a
// WRITE that did not land cannot pass verification by accident.
const readSalt = 0x6b76636f6e6e6563 // "kvconnec"

func patternWord(seed, i uint64) uint64 {
	z := seed ^ i*golden + golden
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// fillPattern writes the pattern for seed into b, which sits at byte
// offset off of its buffer.
func fillPattern(b []byte, off, seed uint64) {
	for j := 0; j < len(b); {
		p := off + uint64(j)
		w := patternWord(seed, p/8)
		if p%8 == 0 && j+8 <= len(b) {
			binary.LittleEndian.PutUint64(b[j:], w)
			j += 8
			continue
		}
		b[j] = byte(w >> (8 * (p % 8)))
		j++
	}
}

// checkPattern reports whether b, at byte offset off of its buffer, holds
// the pattern for seed.
func checkPattern(b []byte, off, seed uint64) bool {
	for j := 0; j < len(b); {
		p := off + uint64(j)
		w := patternWord(seed, p/8)
		if p%8 == 0 && j+8 <= len(b) {
			if binary.LittleEndian.Uint64(b[j:]) != w {
				return false
			}
			j += 8
			continue
		}
		if b[j] != byte(w>>(8*(p%8))) {
			return false
		}
		j++
	}
	return true
}

// maxListedBad bounds VerifyResult.FirstBad.
const maxListedBad = 16

// VerifyResult says which blocks were checked and what was found.
type VerifyResult struct {
	By         string `json:"by"`      // who checked: target or initiator
	Blocks     string `json:"blocks"`  // which blocks, e.g. "0..1023, 2048..3071"
	Checked    int    `json:"checked"` // how many
	BlockSize  int    `json:"block_size"`
	Mismatched int    `json:"mismatched"`
	FirstBad   []int  `json:"first_bad,omitempty"` // up to 16 mismatched block numbers
	OK         bool   `json:"ok"`
	Error      string `json:"error,omitempty"` // verification could not run
	// ReadBytes and WriteBytes are what verification itself moved (its
	// READs and WRITEs), beside the run's bytes.
	ReadBytes  uint64 `json:"read_bytes"`
	WriteBytes uint64 `json:"write_bytes"`
}

// verifyBlocks checks the listed blocks of buf against seed's pattern.
func verifyBlocks(buf []byte, blockSize int, blocks Blocks, seed uint64, by string) VerifyResult {
	v := VerifyResult{By: by, BlockSize: blockSize, Blocks: blocks.String()}
	if blockSize <= 0 {
		v.Error = "block size must be positive"
		return v
	}
	for _, r := range blocks {
		if r.Start < 0 || r.Count < 0 || r.Start+r.Count > len(buf)/blockSize {
			v.Error = "the verification request does not fit this buffer"
			return v
		}
	}
	for _, r := range blocks {
		for k := r.Start; k < r.Start+r.Count; k++ {
			off := k * blockSize
			if !checkPattern(buf[off:off+blockSize], uint64(off), seed) {
				v.Mismatched++
				if len(v.FirstBad) < maxListedBad {
					v.FirstBad = append(v.FirstBad, k)
				}
			}
		}
	}
	v.Checked = blocks.Total()
	if v.Checked == 0 {
		v.Error = "no blocks to check: the run moved none"
	}
	v.OK = v.Mismatched == 0 && v.Checked > 0
	return v
}
