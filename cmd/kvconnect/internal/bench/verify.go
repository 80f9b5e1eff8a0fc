package bench

import (
	"context"
	"fmt"

	"github.com/kvconnect/kvconnect/connector"
	"github.com/kvconnect/kvconnect/units"
)

// Verification needs nothing of the target but its memory, so it works
// against any target: a kvconnect node or an unmodified Mooncake one.
//
//   - WRITE: the initiator's buffer holds seed's pattern for the run; after
//     it, the initiator zeroes its buffer, READs back every block the run
//     wrote and compares.
//   - READ: before the run the initiator WRITEs the salted pattern over
//     every block the run may read, then zeroes its buffer; after it, it
//     compares what it read.
//
// Verify.CorruptBlock, a test hook, zeroes one block of the target (with a
// WRITE) between the run and the check, proving the check compares bytes.

// Verifier checks a run's data against the target.
type Verifier struct {
	Initiator *Node
	Peer      *connector.Peer
	Op        Operation
	Seed      uint64
	BlockSize int
	// CorruptBlock, when >= 0, is zeroed on the target before the check.
	CorruptBlock int

	read, written uint64 // bytes verification moved
}

// verifyBatch bounds the ops of one verification batch.
const verifyBatch = 128

// extent is how many blocks the run can touch: Run's own bound.
func (v *Verifier) extent() (connector.RemoteRegion, int, error) {
	remote := v.Peer.Regions()
	if len(remote) == 0 {
		return connector.RemoteRegion{}, 0, fmt.Errorf("--verify: peer %s publishes no buffer", v.Peer.Session())
	}
	rr := remote[0]
	n := int(min(uint64(v.Initiator.Buf.Len()), rr.Len) / uint64(v.BlockSize))
	if n == 0 {
		return rr, 0, fmt.Errorf("--verify: --block-size %s is larger than the buffers", units.FormatSize(uint64(v.BlockSize)))
	}
	return rr, n, nil
}

// moveBlocks runs kind over blocks (same offset on both sides).
func (v *Verifier) moveBlocks(ctx context.Context, kind connector.OpKind, rr connector.RemoteRegion, blocks Blocks) error {
	bs := uint64(v.BlockSize)
	ops := make([]connector.Op, 0, verifyBatch)
	flush := func() error {
		if len(ops) == 0 {
			return nil
		}
		err := v.Initiator.C.Transfer(ctx, v.Peer, ops...)
		if err == nil {
			n := uint64(len(ops)) * bs
			if kind == connector.OpRead {
				v.read += n
			} else {
				v.written += n
			}
		}
		ops = ops[:0]
		return err
	}
	for _, r := range blocks {
		for k := r.Start; k < r.Start+r.Count; k++ {
			off := uint64(k) * bs
			ops = append(ops, connector.Op{Kind: kind, LocalRegion: v.Initiator.Buf.ID(), LocalOffset: off,
				RemoteRegion: rr.ID, RemoteOffset: off, Length: bs})
			if len(ops) == verifyBatch {
				if err := flush(); err != nil {
					return err
				}
			}
		}
	}
	return flush()
}

// corrupt zeroes block CorruptBlock on the target.
func (v *Verifier) corrupt(ctx context.Context, rr connector.RemoteRegion) error {
	if v.CorruptBlock < 0 {
		return nil
	}
	buf := v.Initiator.Buf.Bytes()
	off := v.CorruptBlock * v.BlockSize
	if off+v.BlockSize > len(buf) {
		return fmt.Errorf("--verify-corrupt-block %d: past the buffer", v.CorruptBlock)
	}
	saved := append([]byte(nil), buf[off:off+v.BlockSize]...)
	clear(buf[off : off+v.BlockSize])
	err := v.moveBlocks(ctx, connector.OpWrite, rr, Blocks{{Start: v.CorruptBlock, Count: 1}})
	copy(buf[off:], saved)
	return err
}

// Prepare readies a verified run (before Run).
func (v *Verifier) Prepare(ctx context.Context) error {
	buf := v.Initiator.Buf.Bytes()
	if v.Op == Write {
		fillPattern(buf, 0, v.Seed)
		return nil
	}
	rr, n, err := v.extent()
	if err != nil {
		return err
	}
	fillPattern(buf, 0, v.Seed^readSalt)
	if err := v.moveBlocks(ctx, connector.OpWrite, rr, Blocks{{Start: 0, Count: n}}); err != nil {
		return fmt.Errorf("--verify: writing the READ pattern to %s: %w", v.Peer.Session(), err)
	}
	if err := v.corrupt(ctx, rr); err != nil {
		return fmt.Errorf("--verify: %w", err)
	}
	clear(buf)
	return nil
}

// Check verifies the blocks the run moved (after Run).
func (v *Verifier) Check(ctx context.Context, blocks Blocks) (VerifyResult, error) {
	buf := v.Initiator.Buf.Bytes()
	if v.Op == Read {
		r := verifyBlocks(buf, v.BlockSize, blocks, v.Seed^readSalt, "initiator")
		r.ReadBytes, r.WriteBytes = v.read, v.written
		return r, nil
	}
	rr, _, err := v.extent()
	if err != nil {
		return VerifyResult{}, err
	}
	if err := v.corrupt(ctx, rr); err != nil {
		return VerifyResult{}, fmt.Errorf("--verify: %w", err)
	}
	clear(buf)
	if err := v.moveBlocks(ctx, connector.OpRead, rr, blocks); err != nil {
		return VerifyResult{}, fmt.Errorf("--verify: reading back what the run wrote to %s: %w", v.Peer.Session(), err)
	}
	r := verifyBlocks(buf, v.BlockSize, blocks, v.Seed, "initiator (read back)")
	r.ReadBytes, r.WriteBytes = v.read, v.written
	return r, nil
}
