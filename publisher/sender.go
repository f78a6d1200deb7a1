package publisher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"

	"github.com/fleetcast/fleetcast/fleet"
	"github.com/fleetcast/fleetcast/logging"
)

// Transport delivers one event; it blocks until the bus acknowledged it or
// failed. The Pub/Sub implementation is pubsubtopic.Transport.
type Transport interface {
	Send(ctx context.Context, ev fleet.Event) error
}

// SenderConfig tunes a Sender.
type SenderConfig struct {
	// MaxInFlight bounds concurrent sends (distinct keys).
	MaxInFlight int
	// InitialBackoff and MaxBackoff bound the wait before retrying a key
	// whose send failed; it doubles with every failure in a row.
	InitialBackoff, MaxBackoff time.Duration
}

// Sender delivers events through a Transport with retries, without ever
// blocking the Agent. It keeps at most one event per key (a fleet, or a
// snapshot part): a newer event replaces an unsent older one, which is
// exactly what the ingest side would keep anyway. So while Pub/Sub is down,
// memory is bounded by the number of fleets, and when it returns the latest
// state of each is delivered. One send per key is in flight at a time, so a
// fleet's events leave in version order.
type Sender struct {
	cfg       SenderConfig
	transport Transport
	clock     Clock
	metrics   *Metrics
	log       *slog.Logger

	mu       sync.Mutex
	queue    map[string]*outgoing // unsent, latest per key
	inflight map[string]bool
	gen      uint64 // bumped by Drop: results of older sends are not retried
	lastOK   time.Time
	failing  bool // the last send failed and nothing succeeded since
	wake     chan struct{}
	idle     chan struct{} // closed while nothing is queued or in flight
	// refused holds the keys whose last event Pub/Sub refused, logged once
	// until one of theirs is published (a delete included).
	refused map[string]struct{}
	// onRefused, if set, hears of every event dropped as refused.
	onRefused func(fleet.Event)
}

// OnRefused sets f to be called, outside the Sender's lock, with every
// event dropped because it can never be published.
func (s *Sender) OnRefused(f func(fleet.Event)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onRefused = f
}

type outgoing struct {
	ev        fleet.Event
	stamped   time.Time
	attempts  int
	backoff   wait.Backoff // of the failures in a row
	notBefore time.Time
}

var _ Sink = (*Sender)(nil)

// NewSender returns a Sender; Run must be running for it to send.
func NewSender(cfg SenderConfig, t Transport, clk Clock, metrics *Metrics, log *slog.Logger) *Sender {
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 256
	}
	if cfg.InitialBackoff <= 0 {
		cfg.InitialBackoff = 200 * time.Millisecond
	}
	if cfg.MaxBackoff < cfg.InitialBackoff {
		cfg.MaxBackoff = 30 * time.Second
	}
	idle := make(chan struct{})
	close(idle)
	return &Sender{
		cfg: cfg, transport: t, clock: clk, metrics: metrics, log: log,
		queue: map[string]*outgoing{}, inflight: map[string]bool{},
		wake: make(chan struct{}, 1), idle: idle, refused: map[string]struct{}{},
	}
}

// sendKey is the unit of "latest wins": a fleet, or one part of a snapshot.
func sendKey(ev fleet.Event) string {
	if ev.Kind == fleet.KindSnapshot {
		return fmt.Sprintf("%s/snapshot/%d/%d", ev.Cluster, ev.Snapshot.Part, ev.Snapshot.Parts)
	}
	return ev.Key().DocID()
}

// Enqueue queues ev, replacing an unsent older event of the same key (a
// refresh of an old version never replaces a newer one).
func (s *Sender) Enqueue(ev fleet.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := sendKey(ev)
	if q, ok := s.queue[key]; ok && q.ev.Version.Compare(ev.Version) > 0 {
		return
	}
	s.queue[key] = &outgoing{ev: ev, stamped: s.clock.Now()}
	s.setBusyLocked()
	s.signal()
}

// Drop discards every queued event; failed in-flight sends are not retried.
func (s *Sender) Drop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.queue)
	s.gen++
	s.setIdleIfDoneLocked()
}

// Flush waits until everything queued has been sent, or ctx ends.
func (s *Sender) Flush(ctx context.Context) error {
	s.mu.Lock()
	idle := s.idle
	n := len(s.queue) + len(s.inflight)
	s.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("flush: %d events not sent: %w", n, ctx.Err())
	}
}

// Healthy reports whether the last send succeeded (or none failed).
func (s *Sender) Healthy() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.failing
}

// PendingKeys adds to keys the fleets with an unacknowledged event.
func (s *Sender) PendingKeys(keys map[string]struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, o := range s.queue {
		if o.ev.Kind != fleet.KindSnapshot {
			keys[k] = struct{}{}
		}
	}
	for k := range s.inflight {
		keys[k] = struct{}{}
	}
}

// Queued returns how many events wait to be sent, and how many are in flight.
func (s *Sender) Queued() (queued, inflight int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue), len(s.inflight)
}

// Run sends until ctx ends.
func (s *Sender) Run(ctx context.Context) {
	var timer clock.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		next := s.dispatch(ctx)
		var timerC <-chan time.Time
		if timer != nil {
			timer.Stop()
			timer = nil
		}
		if !next.IsZero() {
			timer = s.clock.NewTimer(next.Sub(s.clock.Now()))
			timerC = timer.C()
		}
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		case <-timerC:
		}
	}
}

// dispatch starts the sends that are due and returns when the next
// backed-off key becomes due (zero if none).
func (s *Sender) dispatch(ctx context.Context) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	var next time.Time
	for k, o := range s.queue {
		if s.inflight[k] {
			continue
		}
		if o.notBefore.After(now) {
			if next.IsZero() || o.notBefore.Before(next) {
				next = o.notBefore
			}
			continue
		}
		if len(s.inflight) >= s.cfg.MaxInFlight {
			break
		}
		delete(s.queue, k)
		s.inflight[k] = true
		go s.send(ctx, k, o, s.gen)
	}
	return next
}

// PublishSpanName is the name of the span of each publish: from the time
// the event was queued (its fleet's change observed) to Pub/Sub's answer.
// It begins the event's trace, which the message carries to the ingest
// function.
const PublishSpanName = "fleetcast.publish"

// tracer is the global provider's tracer, asked for each span: one kept
// from before the provider was installed would stay bound to the first
// provider ever installed (OpenTelemetry's global delegates once).
func tracer() trace.Tracer { return otel.Tracer("github.com/fleetcast/fleetcast/publisher") }

// startPublishSpan begins the span of one publish, dated from the time its
// event was queued.
func startPublishSpan(ctx context.Context, key string, o *outgoing) (context.Context, trace.Span) {
	attrs := []attribute.KeyValue{
		attribute.String("messaging.system", "gcp_pubsub"),
		attribute.String("messaging.operation.type", "send"),
		attribute.String("fleetcast.cluster", o.ev.Cluster),
		attribute.String("fleetcast.kind", string(o.ev.Kind)),
		attribute.String("fleetcast.version", o.ev.Version.String()),
		attribute.Int("fleetcast.attempt", o.attempts+1),
	}
	if o.ev.Kind != fleet.KindSnapshot {
		attrs = append(attrs, attribute.String("fleetcast.fleet", key))
	}
	return tracer().Start(ctx, PublishSpanName, trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithTimestamp(o.stamped), trace.WithAttributes(attrs...))
}

func (s *Sender) send(ctx context.Context, key string, o *outgoing, gen uint64) {
	ctx, span := startPublishSpan(ctx, key, o)
	defer span.End()
	err := s.transport.Send(ctx, o.ev)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "publish failed")
	}
	refused := s.settle(ctx, key, o, gen, err)
	if refused == nil {
		return
	}
	// Outside the lock, and before the key leaves the events in flight:
	// a Flush returns only once the agent has heard of it, and no later
	// event of the fleet is sent meanwhile.
	refused(o.ev)
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.inflight, key)
	s.setIdleIfDoneLocked()
	s.signal()
}

// settle records what sending o (key's event) did, under the lock: the
// key leaves the events in flight, unless the event was refused and the
// agent is to hear of it (the returned callback, which the caller runs
// and then settles the key).
func (s *Sender) settle(ctx context.Context, key string, o *outgoing, gen uint64, err error) (refused func(fleet.Event)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer func() {
		if refused == nil {
			delete(s.inflight, key)
			s.setIdleIfDoneLocked()
			s.signal()
		}
	}()
	kind := string(o.ev.Kind)
	if err == nil {
		s.metrics.Publishes.WithLabelValues(kind, "ok").Inc()
		s.metrics.PublishLatency.Observe(s.clock.Since(o.stamped).Seconds())
		s.lastOK, s.failing = s.clock.Now(), false
		delete(s.refused, key)
	} else if errors.Is(err, fleet.ErrInvalid) {
		// Resending cannot help: drop it, count it, and say so once per
		// fleet until one of its events goes through again, so that a
		// fleet that keeps changing does not flood the log.
		s.metrics.Publishes.WithLabelValues(kind, "invalid").Inc()
		refused = s.onRefused
		if _, said := s.refused[key]; !said {
			s.refused[key] = struct{}{}
			s.log.ErrorContext(ctx, "dropping an event that cannot be published; later ones of this key are dropped quietly until one succeeds",
				logging.KeyKind, kind, logging.KeyFleet, key, logging.KeyVersion, o.ev.Version.String(), logging.KeyError, err.Error())
		}
	} else {
		s.metrics.Publishes.WithLabelValues(kind, "error").Inc()
		s.failing = true
		_, newer := s.queue[key]
		if gen == s.gen && !newer && ctx.Err() == nil {
			if o.attempts++; o.attempts == 1 {
				o.backoff = s.retryBackoff()
			}
			o.notBefore = s.clock.Now().Add(o.backoff.Step())
			s.queue[key] = o
		}
		s.log.WarnContext(ctx, "publish failed; will retry with the latest state",
			logging.KeyKind, kind, logging.KeyFleet, key, logging.KeyVersion, o.ev.Version.String(),
			"attempts", o.attempts, logging.KeyError, err.Error())
	}
	return refused
}

// retryBackoff is a key's wait before each retry: InitialBackoff doubling
// to MaxBackoff, ±20 % jitter so that many keys do not retry in lockstep.
func (s *Sender) retryBackoff() wait.Backoff {
	return wait.Backoff{Duration: s.cfg.InitialBackoff * 4 / 5, Factor: 2, Jitter: 0.5, Steps: math.MaxInt32, Cap: s.cfg.MaxBackoff * 4 / 5}
}

func (s *Sender) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *Sender) setBusyLocked() {
	select {
	case <-s.idle:
		s.idle = make(chan struct{})
	default:
	}
}

func (s *Sender) setIdleIfDoneLocked() {
	if len(s.queue) > 0 || len(s.inflight) > 0 {
		return
	}
	select {
	case <-s.idle:
	default:
		close(s.idle)
	}
}
