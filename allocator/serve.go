package allocator

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	pb "github.com/fleetcast/fleetcast/gen/agones/allocation"
	"github.com/fleetcast/fleetcast/telemetry"
)

// MaxRequestBytes bounds an allocation request, in gRPC and in JSON: the
// largest one Parse accepts (16 selectors of 64 terms) is about 330 KB.
const MaxRequestBytes = 1 << 20

// RESTPath is where Agones' allocator takes the REST form of Allocate.
const RESTPath = "/gameserverallocation"

// AllocatePath is the gRPC method of Allocate, as a request's path.
const AllocatePath = "/allocation.AllocationService/Allocate"

// Handler serves the allocation API on one port, as agones-allocator does:
// gRPC (HTTP/2 requests of content type application/grpc) through srv,
// and the REST form, POST /gameserverallocation with an AllocationRequest
// as JSON, answered with an AllocationResponse or, as Agones' gateway
// answers, {"code", "message", "details"} with the status's HTTP code.
// Each request is a span (telemetry.Handler), which the tries it
// forwards are children of.
func Handler(s *Service, srv *grpc.Server) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(RESTPath, s.serveREST)
	return telemetry.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			srv.ServeHTTP(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	}), mux, AllocatePath)
}

func (s *Service) serveREST(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeStatus(w, http.StatusMethodNotAllowed, status.Newf(codes.Unimplemented, "method %s not allowed: POST an AllocationRequest as JSON", r.Method))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRequestBytes))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		writeError(w, status.Errorf(codes.InvalidArgument, "the request is larger than %d bytes", MaxRequestBytes))
		return
	case err != nil:
		writeError(w, status.Errorf(codes.InvalidArgument, "reading the request: %v", err))
		return
	}
	var in pb.AllocationRequest
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(body, &in); err != nil {
		writeError(w, status.Errorf(codes.InvalidArgument, "the request is not an AllocationRequest in JSON: %v", err))
		return
	}
	resp, err := s.Allocate(r.Context(), &in)
	if err != nil {
		writeError(w, err)
		return
	}
	out, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(resp)
	if err != nil {
		writeError(w, status.Errorf(codes.Internal, "encoding the response: %v", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

// writeError answers a status as Agones' gateway does.
func writeError(w http.ResponseWriter, err error) {
	st := status.Convert(err)
	writeStatus(w, runtime.HTTPStatusFromCode(st.Code()), st)
}

func writeStatus(w http.ResponseWriter, httpCode int, st *status.Status) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(httpCode)
	_ = json.NewEncoder(w).Encode(struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Details []any  `json:"details"`
	}{int(st.Code()), st.Message(), []any{}})
}

// NewGRPCServer returns a gRPC server of s, its requests bounded by
// MaxRequestBytes.
func NewGRPCServer(s *Service, opts ...grpc.ServerOption) *grpc.Server {
	srv := grpc.NewServer(append([]grpc.ServerOption{grpc.MaxRecvMsgSize(MaxRequestBytes)}, opts...)...)
	pb.RegisterAllocationServiceServer(srv, s)
	return srv
}
