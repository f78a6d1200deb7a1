package fleetclient_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/oauth2"

	"github.com/fleetcast/fleetcast/fleetclient"
	"github.com/fleetcast/fleetcast/internal/testenv/testhttp"
)

// issuer stands in for Google's token endpoints: OAuth (a user's refresh
// token, a service account's signed JWT), STS (a federated token) and the
// IAM Credentials API (an impersonated ID token). Its ID tokens are JWTs
// whose signature nobody checks here.
type issuer struct {
	*httptest.Server
	mu    sync.Mutex
	calls []string
}

func newIssuer(t *testing.T) *issuer {
	is := &issuer{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /token", func(w http.ResponseWriter, r *http.Request) {
		require.NoError(t, r.ParseForm())
		switch r.Form.Get("grant_type") {
		case "refresh_token":
			is.record("refresh " + r.Form.Get("refresh_token"))
			if r.Form.Get("refresh_token") != "user-refresh-token" {
				http.Error(w, `{"error":"invalid_grant"}`, http.StatusBadRequest)
				return
			}
			writeJSON(w, map[string]any{"access_token": "user-access", "token_type": "Bearer", "expires_in": 3600,
				"id_token": jwt(map[string]any{"aud": r.Form.Get("client_id"), "email": "ada@example.com"})})
		case "urn:ietf:params:oauth:grant-type:jwt-bearer":
			claims := payload(t, r.Form.Get("assertion"))
			if aud, ok := claims["target_audience"].(string); ok {
				is.record("sa id token " + aud)
				writeJSON(w, map[string]any{"id_token": jwt(map[string]any{"aud": aud, "email": claims["iss"]})})
				return
			}
			is.record("sa access")
			writeJSON(w, map[string]any{"access_token": "sa-access", "token_type": "Bearer", "expires_in": 3600})
		default:
			http.Error(w, "grant "+r.Form.Get("grant_type"), http.StatusBadRequest)
		}
	})
	mux.HandleFunc("POST /sts", func(w http.ResponseWriter, r *http.Request) {
		require.NoError(t, r.ParseForm())
		is.record("sts " + r.Form.Get("subject_token"))
		writeJSON(w, map[string]any{"access_token": "federated-access", "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
			"token_type": "Bearer", "expires_in": 3600})
	})
	mux.HandleFunc("POST /v1/projects/-/serviceAccounts/{rest}", func(w http.ResponseWriter, r *http.Request) {
		sa, ok := strings.CutSuffix(r.PathValue("rest"), ":generateIdToken")
		var body struct {
			Audience     string `json:"audience"`
			IncludeEmail bool   `json:"includeEmail"`
		}
		require.NoError(t, json.NewDecoder(r.Body).Decode(&body))
		is.record(fmt.Sprintf("generateIdToken %s for %s with %s", sa, body.Audience, r.Header.Get("Authorization")))
		if !ok || !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") || sa == "denied@p.iam.gserviceaccount.com" {
			http.Error(w, `{"error":{"code":403,"status":"PERMISSION_DENIED"}}`, http.StatusForbidden)
			return
		}
		writeJSON(w, map[string]any{"token": jwt(map[string]any{"aud": body.Audience, "email": sa})})
	})
	is.Server = httptest.NewServer(mux)
	t.Cleanup(is.Close)
	return is
}

// googleClient sends what goes to Google's fixed endpoints (the IAM
// Credentials API that Google's impersonate package calls) to the issuer,
// and the rest where it goes.
func (is *issuer) googleClient() *http.Client {
	return testhttp.New(roundTripper(func(r *http.Request) (*http.Response, error) {
		if strings.HasSuffix(r.URL.Host, ".googleapis.com") {
			u, _ := url.Parse(is.URL)
			r = r.Clone(r.Context())
			r.URL.Scheme, r.URL.Host, r.Host = u.Scheme, u.Host, u.Host
		}
		return http.DefaultTransport.RoundTrip(r)
	}))
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (is *issuer) record(s string) {
	is.mu.Lock()
	defer is.mu.Unlock()
	is.calls = append(is.calls, s)
}

func (is *issuer) took() []string {
	is.mu.Lock()
	defer is.mu.Unlock()
	c := is.calls
	is.calls = nil
	return c
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func jwt(claims map[string]any) string {
	claims["exp"] = time.Now().Add(time.Hour).Unix()
	claims["iss"] = "https://accounts.google.com"
	enc := func(v any) string { b, _ := json.Marshal(v); return base64.RawURLEncoding.EncodeToString(b) }
	return enc(map[string]string{"alg": "RS256", "typ": "JWT"}) + "." + enc(claims) + ".c2ln"
}

func payload(t *testing.T, tok string) map[string]any {
	parts := strings.Split(tok, ".")
	require.Len(t, parts, 3, tok)
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	return m
}

func serviceAccountKey(t *testing.T, email, tokenURI string) []byte {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	der, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	b, _ := json.Marshal(map[string]string{
		"type": "service_account", "project_id": "p", "private_key_id": "k1", "client_email": email, "client_id": "1",
		"private_key": string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})), "token_uri": tokenURI,
	})
	return b
}

const function = "https://fleetcast-query-abc123-ew.a.run.app"

// TestIDTokensFromEveryKindOfCredentials: each kind of credentials
// Google's tools make gets an ID token the query function accepts, through
// a local token issuer standing in for Google's.
func TestIDTokensFromEveryKindOfCredentials(t *testing.T) {
	is := newIssuer(t)
	userJSON, _ := json.Marshal(map[string]string{"type": "authorized_user", "client_id": "gcloud-client",
		"client_secret": "s", "refresh_token": "user-refresh-token", "token_uri": is.URL + "/token"})
	subject := filepath.Join(t.TempDir(), "subject-token")
	require.NoError(t, os.WriteFile(subject, []byte("oidc-subject-token"), 0o600))
	wif := func(impersonate bool) []byte {
		m := map[string]any{"type": "external_account", "audience": "//iam.googleapis.com/projects/1/locations/global/workloadIdentityPools/pool/providers/github",
			"subject_token_type": "urn:ietf:params:oauth:token-type:jwt", "token_url": is.URL + "/sts",
			"credential_source": map[string]string{"file": subject}}
		if impersonate {
			m["service_account_impersonation_url"] = "https://iamcredentials.googleapis.com/v1/projects/-/serviceAccounts/ci@p.iam.gserviceaccount.com:generateAccessToken"
		}
		b, _ := json.Marshal(m)
		return b
	}
	impersonatedJSON, _ := json.Marshal(map[string]any{"type": "impersonated_service_account",
		"service_account_impersonation_url": "https://iamcredentials.googleapis.com/v1/projects/-/serviceAccounts/reader@p.iam.gserviceaccount.com:generateAccessToken",
		"source_credentials":                json.RawMessage(userJSON)})

	tests := []struct {
		name        string
		auth        fleetclient.Auth
		aud, email  string
		calls       []string
		errContains string
		// unavailable: the error is not the credentials' (a
		// CredentialsError) but the network's.
		unavailable bool
	}{
		{name: "a user's login", auth: fleetclient.Auth{CredentialsJSON: userJSON},
			aud: "gcloud-client", email: "ada@example.com", calls: []string{"refresh user-refresh-token"}},
		{name: "a service account key", auth: fleetclient.Auth{CredentialsJSON: serviceAccountKey(t, "sa@p.iam.gserviceaccount.com", is.URL+"/token")},
			aud: function, email: "sa@p.iam.gserviceaccount.com", calls: []string{"sa id token " + function}},
		{name: "a user impersonating", auth: fleetclient.Auth{CredentialsJSON: userJSON, ImpersonateServiceAccount: "reader@p.iam.gserviceaccount.com"},
			aud: function, email: "reader@p.iam.gserviceaccount.com",
			calls: []string{"refresh user-refresh-token", "generateIdToken reader@p.iam.gserviceaccount.com for " + function + " with Bearer user-access"}},
		{name: "gcloud's impersonated login", auth: fleetclient.Auth{CredentialsJSON: impersonatedJSON},
			aud: function, email: "reader@p.iam.gserviceaccount.com",
			calls: []string{"refresh user-refresh-token", "generateIdToken reader@p.iam.gserviceaccount.com for " + function + " with Bearer user-access"}},
		{name: "workload identity federation", auth: fleetclient.Auth{CredentialsJSON: wif(true)},
			aud: function, email: "ci@p.iam.gserviceaccount.com",
			calls: []string{"sts oidc-subject-token", "generateIdToken ci@p.iam.gserviceaccount.com for " + function + " with Bearer federated-access"}},
		{name: "workload identity federation, impersonating", auth: fleetclient.Auth{CredentialsJSON: wif(false), ImpersonateServiceAccount: "ci@p.iam.gserviceaccount.com"},
			aud: function, email: "ci@p.iam.gserviceaccount.com",
			calls: []string{"sts oidc-subject-token", "generateIdToken ci@p.iam.gserviceaccount.com for " + function + " with Bearer federated-access"}},
		{name: "workload identity federation without an account", auth: fleetclient.Auth{CredentialsJSON: wif(false)},
			errContains: "cannot get an ID token by itself: impersonate a service account (--impersonate-service-account"},
		{name: "impersonation refused", auth: fleetclient.Auth{CredentialsJSON: userJSON, ImpersonateServiceAccount: "denied@p.iam.gserviceaccount.com"},
			errContains: "the credentials need roles/iam.serviceAccountOpenIdTokenCreator on it"},
		{name: "a revoked login", auth: fleetclient.Auth{CredentialsJSON: []byte(strings.Replace(string(userJSON), "user-refresh-token", "revoked", 1))},
			errContains: "gcloud auth application-default login again?"},
		{name: "not credentials", auth: fleetclient.Auth{CredentialsJSON: []byte(`{"type": "a poem"}`)},
			errContains: `credentials of type "a poem" cannot get an ID token`},
		{name: "the token endpoint unreachable", auth: fleetclient.Auth{CredentialsJSON: []byte(strings.Replace(string(userJSON), is.URL, unreachable(t), 1))},
			errContains: "connection refused", unavailable: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.auth.HTTPClient = is.googleClient()
			ts, err := tt.auth.TokenSource(t.Context(), function)
			var tok *oauth2.Token
			if err == nil {
				tok, err = ts.Token()
			}
			if tt.errContains != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.errContains)
				_, isCreds := errors.AsType[*fleetclient.CredentialsError](err)
				assert.Equal(t, !tt.unavailable, isCreds, "a CredentialsError: %v", err)
				is.took()
				return
			}
			require.NoError(t, err)
			claims := payload(t, tok.AccessToken)
			assert.Equal(t, tt.aud, claims["aud"])
			assert.Equal(t, tt.email, claims["email"])
			assert.WithinDuration(t, time.Now().Add(59*time.Minute), tok.Expiry, time.Minute, "a minute before exp")
			assert.Equal(t, tt.calls, is.took())
			// Reused until it expires.
			_, err = ts.Token()
			require.NoError(t, err)
			assert.Empty(t, is.took())
		})
	}
}

// TestTheClientSendsTheIDToken: with GOOGLE_APPLICATION_CREDENTIALS naming
// a user's login, the query API client sends its ID token over https, to
// the URL's origin and nowhere else; on a loopback address, or over plain
// http, it sends none.
func TestTheClientSendsTheIDToken(t *testing.T) {
	is := newIssuer(t)
	saJSON := serviceAccountKey(t, "reader@p.iam.gserviceaccount.com", is.URL+"/token")
	path := filepath.Join(t.TempDir(), "adc.json")
	require.NoError(t, os.WriteFile(path, saJSON, 0o600))
	t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", path)

	var got sync.Map // host → Authorization
	var elsewhere string
	api := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.Host, r.Header.Get("Authorization"))
		if r.URL.Path == "/v1/redirect" {
			http.Redirect(w, r, elsewhere+"/v1/clusters", http.StatusFound)
			return
		}
		w.Header().Set("Content-Type", "application/proto") // an empty ListClustersResponse
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(api.Close)
	plainAPI := httptest.NewServer(api.Config.Handler)
	t.Cleanup(plainAPI.Close)
	_, tlsPort, _ := net.SplitHostPort(api.Listener.Addr().String())
	_, plainPort, _ := net.SplitHostPort(plainAPI.Listener.Addr().String())
	// Every name resolves to the local servers (example.com is in
	// httptest's certificate).
	tr := api.Client().Transport.(*http.Transport).Clone()
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		_, port, _ := net.SplitHostPort(addr)
		return (&net.Dialer{}).DialContext(ctx, network, "127.0.0.1:"+port)
	}
	ctx := context.WithValue(t.Context(), oauth2.HTTPClient, testhttp.New(tr))
	token := func(host string) string {
		t.Helper()
		auth, _ := got.LoadAndDelete(host)
		s, _ := auth.(string)
		return s
	}

	remote := "https://example.com:" + tlsPort
	hc, err := fleetclient.NewHTTPClient(ctx, remote+"/some/path", fleetclient.Auth{})
	require.NoError(t, err)
	client, err := fleetclient.New(hc, remote+"/some/path")
	require.NoError(t, err)
	_, err = client.ListClusters(t.Context())
	require.NoError(t, err)
	bearer, ok := strings.CutPrefix(token("example.com:"+tlsPort), "Bearer ")
	require.True(t, ok, "an ID token over https")
	assert.Equal(t, remote, payload(t, bearer)["aud"], "for the origin, the audience Cloud Run checks: not the path")
	assert.Equal(t, []string{"sa id token " + remote}, is.took())

	// A redirect to another host gets no token.
	elsewhere = "https://elsewhere.example.com:" + tlsPort
	resp, err := hc.Get(remote + "/v1/redirect")
	require.NoError(t, err)
	resp.Body.Close()
	assert.NotEmpty(t, token("example.com:"+tlsPort))
	assert.Empty(t, token("elsewhere.example.com:"+tlsPort), "the token goes to its origin only")
	is.took()

	// Plain http to a remote name: no token in the clear.
	assert.False(t, fleetclient.SendsToken("http://example.com:"+plainPort))
	plainHC, err := fleetclient.NewHTTPClient(ctx, "http://example.com:"+plainPort, fleetclient.Auth{})
	require.NoError(t, err)
	assert.Same(t, http.DefaultClient, plainHC)
	plain, err := fleetclient.New(plainHC, "http://example.com:"+plainPort)
	require.NoError(t, err)
	_, err = plain.ListClusters(t.Context())
	require.Error(t, err, "http.DefaultClient does not resolve example.com here")
	assert.Empty(t, token("example.com:"+plainPort))

	localHC, err := fleetclient.NewHTTPClient(t.Context(), plainAPI.URL, fleetclient.Auth{})
	require.NoError(t, err)
	local, err := fleetclient.New(localHC, plainAPI.URL)
	require.NoError(t, err)
	_, err = local.ListClusters(t.Context())
	require.NoError(t, err)
	assert.Empty(t, token(strings.TrimPrefix(plainAPI.URL, "http://")), "no token for a loopback address")
	for _, h := range []string{"localhost", "127.0.0.1", "127.1.2.3", "::1"} {
		assert.True(t, fleetclient.IsLoopback(h), h)
	}
	assert.False(t, fleetclient.IsLoopback("example.com"))
	assert.Empty(t, is.took(), "and no token was minted for them")
}

// unreachable is a URL where nothing listens.
func unreachable(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	u := "http://" + l.Addr().String()
	require.NoError(t, l.Close())
	return u
}
