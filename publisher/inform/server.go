package inform

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/fleetcast/fleetcast/fleetapi"
	"github.com/fleetcast/fleetcast/fleetapi/fleetrpc"
	"github.com/fleetcast/fleetcast/telemetry"
)

// Server answers InformationService for one cluster from a Store.
type Server struct {
	svc   *fleetapi.Service
	certs *Certs // nil: plaintext (h2c), asked for explicitly
	log   *slog.Logger
	srv   *http.Server
	ln    net.Listener
	stop  context.CancelCauseFunc
}

// Listen listens on addr for the InformationService of store, over TLS
// with certs, or in plaintext when certs is nil; opts configure the read
// model (its staleness rules; the Store is its Source). Serve serves.
func Listen(addr string, store *Store, certs *Certs, opts fleetapi.Options, log *slog.Logger) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen for InformationService: %w", err)
	}
	opts.Log = log
	s := &Server{svc: fleetapi.NewService(store, opts), certs: certs, log: log, ln: ln}
	base, stop := context.WithCancelCause(context.Background())
	s.stop = stop
	mux := http.NewServeMux()
	mux.Handle(fleetrpc.NewHandler(s.svc, log))
	s.srv = &http.Server{
		Handler:           telemetry.Handler(mux, mux, fleetrpc.Procedures()...),
		Protocols:         new(http.Protocols),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       5 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return base },
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug), // handshakes refused: a client's problem
	}
	s.srv.Protocols.SetHTTP1(true)
	if certs != nil {
		s.srv.Protocols.SetHTTP2(true)
		s.srv.TLSConfig = certs.ServerConfig()
	} else {
		s.srv.Protocols.SetUnencryptedHTTP2(true)
	}
	return s, nil
}

// Addr is the address it listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Serve serves until Shutdown, and returns why it stopped otherwise.
func (s *Server) Serve() error {
	mode := "plaintext (h2c): anyone who reaches the port can read"
	var err error
	switch {
	case s.certs != nil && s.certs.Mutual():
		mode = "mutual TLS: client certificates required and verified"
	case s.certs != nil:
		mode = "TLS, without client certificates"
	}
	s.log.Info("serving fleetcast.v1.InformationService", "addr", s.ln.Addr().String(), "mode", mode)
	if s.certs != nil {
		err = s.srv.ServeTLS(s.ln, "", "")
	} else {
		err = s.srv.Serve(s.ln)
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return fmt.Errorf("serve InformationService: %w", err)
}

// Shutdown ends the streams with UNAVAILABLE, for their clients to resume
// on another instance, and waits for the requests in flight until ctx
// ends, then closes what is left. On a nil Server it does nothing.
func (s *Server) Shutdown(ctx context.Context) {
	if s == nil {
		return
	}
	defer s.ln.Close() // when Serve never ran
	s.stop(fleetrpc.ErrShutdown)
	if err := s.srv.Shutdown(ctx); err != nil {
		_ = s.srv.Close()
	}
}
