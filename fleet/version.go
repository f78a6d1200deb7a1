package fleet

import (
	"cmp"
	"fmt"
)

// Version orders the events of one cluster. Term is a fencing token that
// grows whenever a new publisher instance becomes the writer for the
// cluster; Seq grows with every event within a term. A larger term wins
// regardless of Seq, so events of a deposed publisher that arrive late can
// never overwrite what its successor wrote.
type Version struct {
	Term int64 `json:"term" firestore:"term"`
	Seq  int64 `json:"seq" firestore:"seq"`
}

// Compare returns -1, 0 or +1 as v is older than, equal to or newer than o.
func (v Version) Compare(o Version) int {
	if c := cmp.Compare(v.Term, o.Term); c != 0 {
		return c
	}
	return cmp.Compare(v.Seq, o.Seq)
}

// String formats v as "term.seq".
func (v Version) String() string { return fmt.Sprintf("%d.%d", v.Term, v.Seq) }

// Validate reports whether v can be carried by an event: a term of at least
// 1 (0 is "never written") and a non-negative seq.
func (v Version) Validate() error {
	if v.Term < 1 {
		return fmt.Errorf("%w: version.term %d: must be at least 1", ErrInvalid, v.Term)
	}
	if v.Seq < 0 {
		return fmt.Errorf("%w: version.seq %d: must not be negative", ErrInvalid, v.Seq)
	}
	return nil
}
