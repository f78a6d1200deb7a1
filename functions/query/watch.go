package query

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/klauspost/compress/gzip"

	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/fleetapi/fleetrpc"
)

// watch serves GET /v1/watch: the events of fleetapi.Service.Watch as
// Server-Sent Events, for browsers (EventSource) and curl. Each event's id
// is its resume token: an EventSource that reconnects sends it back as
// Last-Event-ID, which takes precedence over the resumeToken parameter.
// Errors before the first event are the API's error documents; after it,
// an "error" event ends the stream.
func (h *Handler) watch(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET")
		h.failStatus(w, r, http.StatusMethodNotAllowed, "METHOD_NOT_ALLOWED", "", fmt.Sprintf("method %s not allowed; use GET", r.Method))
		return
	}
	q, token, err := fleetapi.ParseWatch(r.URL.Query())
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		token = id
	}
	ctx, stop := fleetrpc.StreamContext(r.Context())
	defer stop()
	rc := http.NewResponseController(w)
	h.streams.Arm(ctx)
	started := false
	// A client that accepts gzip (a browser does) gets the stream
	// gzipped, each step's events flushed through it at once: a large
	// initial set is a tenth of its bytes.
	var out io.Writer = w
	var zw *gzip.Writer
	flush := rc.Flush
	if acceptsGzip(r) {
		zw = newStreamGzip(w)
		out = zw
		flush = func() error {
			if err := zw.Flush(); err != nil {
				return err
			}
			return rc.Flush()
		}
	}
	defer func() {
		if zw != nil && started {
			_ = zw.Close()
		}
	}()
	// A step's events are written, then flushed once: a large initial set
	// goes out in a few writes, not one per fleet.
	err = h.watchSteps(ctx, q, token, func(events []fleetapi.Event) error {
		if !started {
			hd := w.Header()
			hd.Set("Content-Type", "text/event-stream")
			hd.Set("Cache-Control", "no-store")
			hd.Set("X-Accel-Buffering", "no") // proxies: do not buffer the stream
			hd.Set("Vary", "Accept-Encoding")
			if zw != nil {
				hd.Set("Content-Encoding", "gzip")
			}
			w.WriteHeader(http.StatusOK)
			started = true
		}
		for _, e := range events {
			if err := writeEvent(out, e.ResumeToken, string(e.Kind), sseData(e)); err != nil {
				return err
			}
		}
		return flush()
	})
	switch {
	case err != nil && h.streams.Stalled(ctx, r.URL.Path, err):
	case err != nil && ctx.Err() != nil:
		// The client went away while an event was written.
	case err != nil && !started:
		h.fail(w, r, err)
	case err != nil:
		e := fleetrpc.LogFault(ctx, h.log, r.URL.Path, err)
		_ = writeEvent(out, "", "error", map[string]any{"code": httpStatus[e.Code], "status": e.Code, "message": e.Message})
	case fleetrpc.EndedByServer(ctx) != nil:
		_ = writeEvent(out, "", "error", map[string]any{"code": http.StatusServiceUnavailable, "status": fleetapi.Unavailable,
			"message": fleetrpc.EndedByServer(ctx).Error()})
	}
}

// sseData is an event's data: the /v1 shape of what it carries.
func sseData(e fleetapi.Event) any {
	switch e.Kind {
	case fleetapi.Added, fleetapi.Modified, fleetapi.Removed:
		return e.Fleet
	case fleetapi.ClusterChanged:
		return e.Cluster
	case fleetapi.Synced:
		return map[string]int{"fleetCount": e.FleetCount}
	case fleetapi.Heartbeat:
		return map[string]time.Time{"time": e.Time}
	}
	return struct{}{}
}

func writeEvent(w io.Writer, id, kind string, data any) error {
	b, err := json.Marshal(data)
	if err != nil {
		return err
	}
	if id != "" {
		if _, err := fmt.Fprintf(w, "id: %s\n", id); err != nil {
			return err
		}
	}
	_, err = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", kind, b)
	return err
}

// watchSteps is the view's WatchSteps; over partitions, their merged
// Watch, an event a step.
func (h *Handler) watchSteps(ctx context.Context, q fleetapi.Query, token string, send func([]fleetapi.Event) error) error {
	if h.svc != nil {
		return h.svc.WatchSteps(ctx, q, token, send)
	}
	step := make([]fleetapi.Event, 1)
	return h.api.Watch(ctx, q, token, func(e fleetapi.Event) error {
		step[0] = e
		return send(step)
	})
}
