package fleetview

import (
	"encoding/base64"
	"encoding/json"
	"errors"

	"github.com/fleetcast/fleetcast/fleet"
)

// Filter is what a watch follows: the fleets it matches, and the clusters
// it hears of.
type Filter interface {
	// Matches reports whether a live document is in the set; stale says
	// whether its cluster is.
	Matches(d *fleet.Document, stale bool) bool
	// HasCluster reports whether the watch hears of cluster: every
	// cluster, unless the filter names some.
	HasCluster(name string) bool
}

// Kind says what a watch event is (fleetapi.EventKind words it).
type Kind uint8

// Kinds of watch event.
const (
	// Added: a fleet entered the set.
	Added Kind = iota + 1
	// Modified: a fleet in the set changed.
	Modified
	// Removed: a fleet left the set; Doc is its last state.
	Removed
	// ClusterChanged: a cluster appeared, turned stale or fresh, or
	// changed what the API shows of it.
	ClusterChanged
	// Synced ends the initial set, or the changes missed before a
	// resume.
	Synced
	// Restart: the watch starts over; the whole set follows.
	Restart
)

// Event is one event of a watch. Its documents are the view's, shared:
// read them, never change them.
type Event struct {
	Kind Kind
	// Doc: of Added, Modified and Removed.
	Doc *fleet.Document
	// Cluster and Name: of ClusterChanged; Cluster is nil while the
	// cluster has no document.
	Cluster *fleet.ClusterDocument
	Name    string
	// Stale: whether the fleet's (or the cluster's) cluster is stale.
	Stale bool
	// Count: of Synced, the fleets in the set.
	Count int
	// Token resumes the watch after this event.
	Token string
}

// Errors of a resume token.
var (
	// ErrBadToken: not a resume token of this API.
	ErrBadToken = errors.New("not a resume token of this API; start again without one")
	// ErrOtherFilter: a token of a watch with other filters.
	ErrOtherFilter = errors.New("a token of a watch with other filters; resume with the same filters")
)

// position is where a watch stands in the feed of its Engine, carried by
// its resume tokens: the client holds the set at seq From (nothing, when
// Initial) and the first N events that take it to the set at seq To.
// From == To and N == 0 when it holds the set at To.
type position struct {
	Epoch   uint64 `json:"e"`
	Filter  string `json:"f"`
	Initial bool   `json:"i,omitempty"`
	From    uint64 `json:"a,omitempty"`
	To      uint64 `json:"b,omitempty"`
	N       int    `json:"n,omitempty"`
}

func (p position) steady() bool { return !p.Initial && p.From == p.To && p.N == 0 }

func (p position) at(seq uint64) position {
	return position{Epoch: p.Epoch, Filter: p.Filter, From: seq, To: seq}
}

func (p position) token() string {
	b, _ := json.Marshal(p) // a struct of numbers and strings
	return base64.RawURLEncoding.EncodeToString(b)
}

func parsePosition(token, filter string) (position, error) {
	var p position
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err == nil {
		err = json.Unmarshal(b, &p)
	}
	if err != nil || p.Epoch == 0 || p.N < 0 {
		return position{}, ErrBadToken
	}
	if p.Filter != filter {
		return position{}, ErrOtherFilter
	}
	return p, nil
}

// Watcher is one watch's place in its Engine's feed. It is not safe for
// concurrent use: one stream steps it.
type Watcher struct {
	e   *Engine
	f   Filter
	pos position
	cur cursor
}

// Watch returns a watch of f from resumeToken (from the newest snapshot
// when empty). fingerprint identifies f: a token resumes only a watch of
// the same fingerprint. A token that does not parse is ErrBadToken, one
// of another filter ErrOtherFilter; one of another Engine, or older than
// the feed holds, restarts the watch at its first Step.
func (e *Engine) Watch(f Filter, fingerprint, resumeToken string) (*Watcher, error) {
	w := &Watcher{e: e, f: f}
	if resumeToken == "" {
		w.pos = position{Epoch: e.epoch, Filter: fingerprint, Initial: true, To: e.Current().feed.seq}
		return w, nil
	}
	p, err := parsePosition(resumeToken, fingerprint)
	if err != nil {
		return nil, err
	}
	w.pos, w.cur.resumed = p, true
	return w, nil
}

// Token resumes the watch after the last event of its last Step.
func (w *Watcher) Token() string { return w.pos.token() }

// Step is what a watch sends next.
type Step struct {
	Events []Event
	// More: the step goes on, and its next chunk follows at once.
	More bool
	// Updated is closed when a snapshot with changes this step has not
	// seen is published.
	Updated <-chan struct{}
}

// Step brings the watch up to the newest snapshot, at most StepEvents
// events at a time, coalescing every change since its previous step to
// the newest state of each fleet: a client that reads slowly gets fewer,
// newer events, and delays no other watch.
func (w *Watcher) Step() Step {
	s := w.e.Current()
	st := s.step(w.f, w.pos, &w.cur, w.e.opts.StepEvents)
	w.pos = st.next
	out := Step{Events: make([]Event, len(st.events)), More: st.more, Updated: st.updated}
	for i, p := range st.events {
		p.Token = st.tokens[i].token()
		out.Events[i] = p
	}
	return out
}
