package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	fleetcastv1 "github.com/fleetcast/fleetcast/gen/fleetcast/v1"
	"github.com/fleetcast/fleetcast/internal/testenv/tlstest"
)

// server is an InformationService of two pages, one fleet each; it
// refuses a selector it cannot parse, as the real ones do.
type server struct {
	fleetcastv1.UnimplementedInformationServiceServer
	got []*fleetcastv1.InformRequest
}

func (s *server) Inform(_ context.Context, req *fleetcastv1.InformRequest) (*fleetcastv1.InformResponse, error) {
	s.got = append(s.got, req)
	if req.GetFilter().GetSelector() == "platform in (pc" {
		return nil, status.Error(codes.InvalidArgument, "filter.selector: unable to parse requirement")
	}
	if req.GetPageToken() == "" {
		return &fleetcastv1.InformResponse{NextPageToken: "2", FleetInformation: []*fleetcastv1.FleetInformation{
			{ClusterName: "pc", Namespace: "games", FleetName: "ranked", ReadyGameservers: 8, AllocatedGameservers: 2}}}, nil
	}
	return &fleetcastv1.InformResponse{FleetInformation: []*fleetcastv1.FleetInformation{
		{ClusterName: "pc", Namespace: "games", FleetName: "casual", ReadyGameservers: 2, AllocatedGameservers: 8}}}, nil
}

// TestAsksOverMutualTLS: a real grpc-go server requiring client
// certificates of its CA; the example presents one, pages through Inform
// and prints each fleet, and says what the server refused.
func TestAsksOverMutualTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	dir := tlstest.Dir(t)
	srvCert := ca.Server(t, "fleetcast-publisher").TLS(t)
	client := ca.Client(t, "matchmaker")
	s := &server{}
	g := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{srvCert}, ClientCAs: ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12})))
	fleetcastv1.RegisterInformationServiceServer(g, s)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go g.Serve(ln) //nolint:errcheck // stopped below
	t.Cleanup(g.Stop)
	flags := []string{"--addr", ln.Addr().String(), "--server-name", "localhost",
		"--cert", tlstest.Write(t, dir, "client.crt", client.Cert), "--key", tlstest.Write(t, dir, "client.key", client.Key),
		"--ca", tlstest.Write(t, dir, "ca.crt", ca.PEM), "--timeout", "5s"}

	var out, errOut bytes.Buffer
	require.NoError(t, run(t.Context(), append(flags, "-l", "platform=pc", "--min-ready", "2"), &out, &errOut), errOut.String())
	assert.Equal(t, "pc/games/ranked\tready=8\tallocated=2\npc/games/casual\tready=2\tallocated=8\n", out.String())
	require.Len(t, s.got, 2, "both pages")
	assert.Equal(t, "platform=pc", s.got[0].GetFilter().GetSelector())
	assert.Equal(t, int64(2), s.got[0].GetFilter().GetMinReady())
	assert.Equal(t, fleetcastv1.OrderBy_ORDER_BY_READY, s.got[0].GetOrderBy())
	assert.Equal(t, "2", s.got[1].GetPageToken())

	err = run(t.Context(), append(flags, "-l", "platform in (pc"), &out, &errOut)
	assert.ErrorContains(t, err, "Inform: InvalidArgument: filter.selector")

	// Without its certificate the server refuses the matchmaker.
	err = run(t.Context(), []string{"--addr", ln.Addr().String(), "--server-name", "localhost", "--ca", flags[len(flags)-3], "--timeout", "5s"}, &out, &errOut)
	assert.ErrorContains(t, err, "Unavailable")
	assert.ErrorContains(t, run(t.Context(), []string{"--cert", "c"}, &out, &errOut), "--addr is required")
}
