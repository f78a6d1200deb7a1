package fleetapi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"
)

// Watcher streams the live fleets matching a query, then every change to
// that set (Service.Watch; fleetclient.Client.Watch over the API).
type Watcher interface {
	Watch(ctx context.Context, q Query, resumeToken string, send func(Event) error) error
}

var _ Watcher = (*Service)(nil)
var _ Watcher = (*Partitions)(nil)

// The backoff of a partition's stream that fails before any event: its
// first retry after about partitionRetryMin, at most partitionRetryMax
// apart.
const partitionRetryMin, partitionRetryMax = 100 * time.Millisecond, 5 * time.Second

// mergedToken is a merged watch's resume token: each partition's own, in
// partition order, and a digest of the partitions (their names and
// clusters): a token of another configuration restarts the watch.
type mergedToken struct {
	Partitions uint64   `json:"p"`
	Tokens     []string `json:"t"`
}

func (t mergedToken) encode() string {
	b, _ := json.Marshal(t) // a number and strings
	return base64.RawURLEncoding.EncodeToString(b)
}

// digest identifies the partitions' configuration.
func (p *Partitions) digest() uint64 {
	h := fnv.New64a()
	for _, part := range p.parts {
		h.Write([]byte(part.Name + "\x00" + strings.Join(part.Clusters, ",") + "\x00"))
	}
	return h.Sum64()
}

// parseToken reads a merged watch's resume token: each partition's
// token, and whether the watch must restart (a token of other
// partitions).
func (p *Partitions) parseToken(token string) (tokens []string, restart bool, err error) {
	tokens = make([]string, len(p.parts))
	if token == "" {
		return tokens, false, nil
	}
	var t mergedToken
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err == nil {
		err = json.Unmarshal(b, &t)
	}
	if err != nil {
		return nil, false, paramErr("resumeToken", "not a resume token of this service")
	}
	if t.Partitions != p.digest() || len(t.Tokens) != len(p.parts) {
		return tokens, true, nil
	}
	return t.Tokens, false, nil
}

// partEvent is what a partition's stream hands the merged watch: an event
// of it, or news that it is down (its stream failed before any event).
type partEvent struct {
	i    int
	e    Event
	down bool
}

// errRestart ends a merged watch's round: a partition restarted, so every
// partition starts over.
var errRestart = errors.New("a partition restarted its watch")

// Watch sends the live fleets of every partition matching q, then every
// change to that set, as one view's watch would: each partition's watch
// of the query narrowed to its clusters, merged into one stream with one
// resume token (each partition's own, together). Synced follows once
// every partition's initial set (or resumed changes) went out. A
// partition's stream that ends is resumed at once with its token; one
// that fails before any event is down: its clusters are sent stale (as
// it last described them) and it is retried with backoff, the others'
// changes flowing meanwhile; once it answers, the changes it missed
// follow, then its clusters as it now describes them. A partition that
// restarts its watch (its token unusable: another instance's) restarts
// the merged one: Restart, then the whole set. Partitions' heartbeats are
// replaced by the merged watch's own, every DefaultHeartbeat.
func (p *Partitions) Watch(ctx context.Context, q Query, resumeToken string, send func(Event) error) error {
	q = q.normalized()
	if err := p.known(q.Clusters...); err != nil {
		return err
	}
	tokens, restart, err := p.parseToken(resumeToken)
	if err != nil {
		return err
	}
	if !p.watches.TryAcquire(1) {
		return &Error{Code: ResourceExhausted, Message: fmt.Sprintf(
			"this instance serves its most streams (%d); retry shortly, another instance may take it", p.opts.MaxWatches)}
	}
	defer p.watches.Release(1)
	// Refused as one view refuses it: a counter or list no partition's
	// clusters report (a page of one fleet asks every partition).
	first := q
	first.PageSize, first.After = 1, nil
	if _, err := p.ListFleets(ctx, first); err != nil && CodeOf(err) == InvalidArgument {
		return err
	}
	if restart {
		tokens = make([]string, len(p.parts))
		if err := send(Event{Kind: Restart, ResumeToken: p.token(tokens)}); err != nil {
			return err
		}
	}
	for {
		err := p.watchRound(ctx, q, tokens, send)
		if !errors.Is(err, errRestart) {
			return err
		}
		tokens = make([]string, len(p.parts))
		if err := send(Event{Kind: Restart, ResumeToken: p.token(tokens)}); err != nil {
			return err
		}
	}
}

func (p *Partitions) token(tokens []string) string {
	return mergedToken{Partitions: p.digest(), Tokens: tokens}.encode()
}

// watchRound runs every concerned partition's stream from tokens until
// ctx ends, send fails or a partition restarts (errRestart).
func (p *Partitions) watchRound(ctx context.Context, q Query, tokens []string, send func(Event) error) error {
	ctx, cancel := context.WithCancel(ctx)
	var followers sync.WaitGroup
	defer func() {
		cancel()
		followers.Wait()
	}()
	events := make(chan partEvent)
	tokens = slices.Clone(tokens)
	synced := map[int]bool{}
	count := 0
	// clusters holds each watched cluster as its partition last sent it,
	// to send it stale while the partition is down.
	clusters := map[string]Cluster{}
	concerned := 0
	for i := range p.parts {
		n := q.Narrowed(p.parts[i].Clusters)
		if n == nil {
			continue
		}
		concerned++
		followers.Go(func() { p.follow(ctx, i, *n, tokens[i], events) })
	}
	sentSynced := false
	heartbeat := time.NewTicker(DefaultHeartbeat)
	defer heartbeat.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-heartbeat.C:
			if err := send(Event{Kind: Heartbeat, Time: time.Now(), ResumeToken: p.token(tokens)}); err != nil {
				return err
			}
		case pe := <-events:
			if pe.down {
				synced[pe.i] = true
				for _, last := range p.lastClusters(pe.i) {
					if len(q.Clusters) > 0 && !slices.Contains(q.Clusters, last.Cluster) {
						continue
					}
					c, ok := clusters[last.Cluster]
					if !ok {
						c = last
					}
					c.Stale = true
					if err := send(Event{Kind: ClusterChanged, Cluster: c, ResumeToken: p.token(tokens)}); err != nil {
						return err
					}
				}
			} else {
				e := pe.e
				if e.ResumeToken != "" {
					tokens[pe.i] = e.ResumeToken
				}
				switch e.Kind {
				case Restart:
					return errRestart
				case Heartbeat:
					continue
				case Synced:
					if !synced[pe.i] {
						synced[pe.i] = true
						count += e.FleetCount
					}
				case ClusterChanged:
					clusters[e.Cluster.Cluster] = e.Cluster
					fallthrough
				default:
					e.ResumeToken = p.token(tokens)
					if err := send(e); err != nil {
						return err
					}
				}
			}
			if !sentSynced && len(synced) == concerned {
				sentSynced = true
				if err := send(Event{Kind: Synced, FleetCount: count, ResumeToken: p.token(tokens)}); err != nil {
					return err
				}
			}
		}
	}
}

// follow runs partition i's watch of q from token, handing its events to
// out, until ctx ends: a stream that ends after events is resumed at
// once; one that fails before any is reported down and retried with
// backoff; once a stream that was down syncs, its clusters follow as the
// partition now lists them.
func (p *Partitions) follow(ctx context.Context, i int, q Query, token string, out chan<- partEvent) {
	w, ok := p.parts[i].API.(Watcher)
	hand := func(pe partEvent) bool {
		select {
		case out <- pe:
			return true
		case <-ctx.Done():
			return false
		}
	}
	if !ok {
		p.logDown(i, errors.New("its API serves no watch"))
		hand(partEvent{i: i, down: true})
		return
	}
	// Doubling delays with jitter, as wait.Backoff draws them: the read
	// model does not link apimachinery's wait package and what it pulls
	// in (the house test bounds its dependencies).
	delay := partitionRetryMin
	wasDown := false
	for ctx.Err() == nil {
		delivered := false
		err := w.Watch(ctx, q, token, func(e Event) error {
			delivered = true
			if e.ResumeToken != "" {
				token = e.ResumeToken
			}
			if !hand(partEvent{i: i, e: e}) {
				return ctx.Err()
			}
			if e.Kind == Synced && wasDown {
				if err := p.refreshClusters(ctx, i, q, token, hand); err != nil {
					return err // resumed at once, and refreshed at its Synced
				}
				wasDown = false
			}
			return nil
		})
		if ctx.Err() != nil {
			return
		}
		if delivered {
			delay = partitionRetryMin
			continue // the stream ended (its deadline): resume at once
		}
		if unknownKey(err) {
			// Its clusters report no such counter or list: nothing of
			// it matches, now or later (a new one needs a new watch).
			if !hand(partEvent{i: i, e: Event{Kind: Synced, ResumeToken: token}}) {
				return
			}
			<-ctx.Done()
			return
		}
		if !wasDown {
			wasDown = true
			p.logDown(i, err)
			if !hand(partEvent{i: i, down: true}) {
				return
			}
		}
		t := time.NewTimer(delay + rand.N(delay/2))
		delay = min(2*delay, partitionRetryMax)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// refreshClusters hands partition i's watched clusters as it now lists
// them (after it was down, and its clusters sent stale).
func (p *Partitions) refreshClusters(ctx context.Context, i int, q Query, token string, hand func(partEvent) bool) error {
	lctx, cancel := context.WithTimeout(ctx, p.opts.Timeout)
	defer cancel()
	l, err := p.parts[i].API.ListClusters(lctx)
	if err != nil {
		return fmt.Errorf("list the clusters of partition %s: %w", p.parts[i].Name, err)
	}
	for _, c := range l.Items {
		if !slices.Contains(p.parts[i].Clusters, c.Cluster) || len(q.Clusters) > 0 && !slices.Contains(q.Clusters, c.Cluster) {
			continue
		}
		if !hand(partEvent{i: i, e: Event{Kind: ClusterChanged, Cluster: c, ResumeToken: token}}) {
			return ctx.Err()
		}
	}
	return nil
}

func (p *Partitions) logDown(i int, err error) {
	p.unanswered(i, "watch", "its clusters are sent stale while it is retried", err)
}
