// Package fleetclient is the Go client of fleetcast's query API: the
// QueryFleets function's fleetcast.v1.InformationService, answering with
// the read model's types (package fleetapi).
//
// # Creating a client
//
// New takes an http.Client and the function's URL, as connect-go's
// clients do:
//
//	hc, err := fleetclient.NewHTTPClient(ctx, url, fleetclient.Auth{})
//	...
//	client, err := fleetclient.New(hc, url)
//
// The calls go over Connect; WithClientOptions(connect.WithGRPC()) or
// connect.WithGRPCWeb() choose another protocol the function serves.
//
// # Authentication
//
// Authentication is the http.Client's business. Cloud Functions IAM wants
// a Google-signed ID token for the function's URL; NewHTTPClient makes a
// client that sends one, to that URL's origin only (never to where a
// redirect points), and none over plain http or to a loopback address (a
// local runner, gcloud run services proxy). Auth says where the token
// comes from: Application Default Credentials by default — a service
// account key or the metadata server (google.golang.org/api/idtoken), a
// user's login, Workload Identity Federation — or an impersonated service
// account (google.golang.org/api/impersonate).
//
// # Errors
//
// Every error a call returns is a *fleetapi.Error whose Code says what the caller can do:
// InvalidArgument (Param names the /v1 parameter), NotFound, Unavailable
// and ResourceExhausted (retry), PermissionDenied (the credentials), or
// Internal. ErrorOf reads a Connect error of the service the same way, for
// callers of InformationService directly.
//
// # Watching
//
// A Client answers pages; to follow every change, give its
// InformationService to fleetwatch.WatchAPI, which keeps a live view from
// the WatchFleets stream.
package fleetclient
