package bill

import (
	"container/heap"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// Span is one request a function served: when it began and ended.
type Span struct{ Begin, End time.Time }

// Spans records the spans of requests; it is safe for concurrent use.
type Spans struct {
	mu    sync.Mutex
	spans []Span
}

// Add records a request that began at begin and ended at end.
func (r *Spans) Add(begin, end time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.spans = append(r.spans, Span{begin, end})
}

// Within returns the spans that began in [from, to).
func (r *Spans) Within(from, to time.Time) []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Span
	for _, s := range r.spans {
		if !s.Begin.Before(from) && s.Begin.Before(to) {
			out = append(out, s)
		}
	}
	return out
}

// InstanceTime bills requests as Cloud Run's request-based billing does.
// Each request goes to the first instance serving fewer than concurrency
// requests, or to a new one; an instance is billed while it serves at
// least one request, from the start of the first to the end of the last,
// each such busy period rounded up to rounding (a request alone, however
// short, bills one rounding). A period that begins within the rounded end
// of the one before continues its billed time: an instance is never
// billed twice for the same moment. It returns the instance time billed
// and the most instances busy at once.
func InstanceTime(spans []Span, concurrency int, rounding time.Duration) (billed time.Duration, instances int) {
	spans = slices.Clone(spans)
	slices.SortFunc(spans, func(a, b Span) int { return a.Begin.Compare(b.Begin) })
	type instance struct {
		active      int
		since       time.Time
		billedUntil time.Time
	}
	var pool []*instance
	ends := &endHeap{}
	finish := func(e end) {
		in := pool[e.instance]
		in.active--
		if in.active > 0 {
			return
		}
		until := in.since.Add(roundUp(max(e.at.Sub(in.since), 0), rounding))
		from := in.since
		if from.Before(in.billedUntil) {
			from = in.billedUntil
		}
		if until.After(from) {
			billed += until.Sub(from)
			in.billedUntil = until
		}
	}
	busy := 0
	for _, s := range spans {
		for ends.Len() > 0 && !(*ends)[0].at.After(s.Begin) {
			finish(heap.Pop(ends).(end))
		}
		i := slices.IndexFunc(pool, func(in *instance) bool { return in.active < concurrency })
		if i < 0 {
			i = len(pool)
			pool = append(pool, &instance{})
		}
		if pool[i].active == 0 {
			pool[i].since = s.Begin
		}
		pool[i].active++
		heap.Push(ends, end{at: s.End, instance: i})
		busy = 0
		for _, in := range pool {
			if in.active > 0 {
				busy++
			}
		}
		instances = max(instances, busy)
	}
	for ends.Len() > 0 {
		finish(heap.Pop(ends).(end))
	}
	return billed, instances
}

// Superpose returns first with copies more copies of others, each shifted
// by its own random offset and wrapped around within [from, from+window):
// the requests of independent sources (clusters) sharing one function,
// from the trace of one (first) and the part of it the others share
// (others: without the traffic only the first has).
func Superpose(first, others []Span, from time.Time, window time.Duration, copies int, rng *rand.Rand) []Span {
	out := slices.Clone(first)
	for range copies {
		offset := time.Duration(rng.Int64N(int64(window)))
		for _, s := range others {
			begin := from.Add((s.Begin.Sub(from) + offset) % window)
			out = append(out, Span{begin, begin.Add(s.End.Sub(s.Begin))})
		}
	}
	return out
}

// roundUp rounds d up to a multiple of unit; a zero period still bills one
// unit, as a request always does.
func roundUp(d, unit time.Duration) time.Duration {
	if unit <= 0 {
		return d
	}
	n := (d + unit - 1) / unit
	return max(n, 1) * unit
}

// end is when a request on an instance ends.
type end struct {
	at       time.Time
	instance int
}

// endHeap orders ends by time.
type endHeap []end

func (h endHeap) Len() int           { return len(h) }
func (h endHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h endHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *endHeap) Push(x any)        { *h = append(*h, x.(end)) }
func (h *endHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
