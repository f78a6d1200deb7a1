package fleetclient

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/google"
	"google.golang.org/api/idtoken"
	"google.golang.org/api/impersonate"
	"google.golang.org/api/option"
)

// Google's token endpoint, where a user's login refreshes.
const (
	defaultTokenURL    = "https://oauth2.googleapis.com/token"
	cloudPlatformScope = "https://www.googleapis.com/auth/cloud-platform"
)

// Auth says how a client of the query API gets the Google-signed ID token
// that Cloud Functions IAM requires, from any credentials Google's tools
// make:
//   - a service account's key, or the metadata server (Cloud Run, GKE,
//     GCE): an ID token for the function's URL (google.golang.org/api/idtoken);
//   - a user's login (gcloud auth application-default login): the ID token
//     Google's token endpoint returns with each refresh, as gcloud auth
//     print-identity-token does (Google's libraries mint none from a
//     user's login);
//   - impersonation (ImpersonateServiceAccount, or gcloud's
//     --impersonate-service-account login): an ID token for the function's
//     URL minted by the IAM Credentials API as that service account
//     (google.golang.org/api/impersonate), authorised by the credentials;
//   - Workload Identity Federation (an external_account configuration): the
//     federated token impersonates the configuration's service account, or
//     ImpersonateServiceAccount, the same way.
type Auth struct {
	// CredentialsJSON is a credentials file's content; empty:
	// Application Default Credentials (GOOGLE_APPLICATION_CREDENTIALS,
	// gcloud's application default login, or the metadata server).
	CredentialsJSON []byte
	// ImpersonateServiceAccount, if set, mints the ID tokens as this
	// service account: the credentials need
	// roles/iam.serviceAccountOpenIdTokenCreator on it.
	ImpersonateServiceAccount string
	// HTTPClient makes the token requests, Google's endpoints' included;
	// http.DefaultClient when nil.
	HTTPClient *http.Client
}

// credentialsFile is what Auth reads of a credentials file.
type credentialsFile struct {
	Type                           string          `json:"type"`
	ClientID                       string          `json:"client_id"`
	ClientSecret                   string          `json:"client_secret"`
	RefreshToken                   string          `json:"refresh_token"`
	TokenURI                       string          `json:"token_uri"`
	ServiceAccountImpersonationURL string          `json:"service_account_impersonation_url"`
	SourceCredentials              json.RawMessage `json:"source_credentials"`
}

// CredentialsError is a failure of the credentials themselves: none
// found, a file that is not credentials, credentials that cannot get an ID
// token, or a token Google's endpoints refuse them (an expired or revoked
// login, a deleted key, a missing role to impersonate). A token endpoint
// that cannot be reached is not one. ErrorOf makes it PermissionDenied;
// the CLI exits 5.
type CredentialsError struct{ Err error }

func (e *CredentialsError) Error() string { return e.Err.Error() }
func (e *CredentialsError) Unwrap() error { return e.Err }

// TokenSource returns a source of ID tokens for audience (the function's
// URL). Its errors, and its tokens' refusals, are *CredentialsError.
func (a Auth) TokenSource(ctx context.Context, audience string) (oauth2.TokenSource, error) {
	ts, err := a.tokenSource(ctx, audience)
	if err != nil {
		return nil, &CredentialsError{err}
	}
	return refusals{ts}, nil
}

// refusals makes a token source's refusals CredentialsErrors.
type refusals struct{ oauth2.TokenSource }

func (r refusals) Token() (*oauth2.Token, error) {
	t, err := r.TokenSource.Token()
	if err != nil && refused(err) {
		return nil, &CredentialsError{err}
	}
	return t, err
}

// refused reports whether a token endpoint answered err: a 4xx of OAuth's
// (oauth2.RetrieveError), of a user's login refreshed (httpStatusError)
// or of the IAM Credentials API, whose error Google's impersonate package
// does not wrap (it says "impersonate: status code 403: …").
func refused(err error) bool {
	if _, ok := errors.AsType[*oauth2.RetrieveError](err); ok {
		return true
	}
	if e, ok := errors.AsType[*httpStatusError](err); ok {
		return e.code/100 == 4
	}
	return strings.Contains(err.Error(), "impersonate: status code 4")
}

func (a Auth) tokenSource(ctx context.Context, audience string) (oauth2.TokenSource, error) {
	ctx = context.WithValue(ctx, oauth2.HTTPClient, a.client())
	raw := a.CredentialsJSON
	if len(raw) == 0 {
		creds, err := google.FindDefaultCredentials(ctx, cloudPlatformScope)
		if err != nil {
			return nil, fmt.Errorf("no credentials: run gcloud auth application-default login, or set GOOGLE_APPLICATION_CREDENTIALS (%w)", err)
		}
		if raw = creds.JSON; len(raw) == 0 { // the metadata server
			if a.ImpersonateServiceAccount != "" {
				return a.impersonate(ctx, creds.TokenSource, a.ImpersonateServiceAccount, audience)
			}
			return idtoken.NewTokenSource(ctx, audience)
		}
	}
	var f credentialsFile
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, fmt.Errorf("credentials: not a credentials file: %w", err)
	}
	base := func(raw []byte) (oauth2.TokenSource, error) {
		creds, err := google.CredentialsFromJSON(ctx, raw, cloudPlatformScope)
		if err != nil {
			return nil, fmt.Errorf("credentials (%s): %w", f.Type, err)
		}
		return creds.TokenSource, nil
	}
	if sa := a.ImpersonateServiceAccount; sa != "" {
		ts, err := base(raw)
		if err != nil {
			return nil, err
		}
		return a.impersonate(ctx, ts, sa, audience)
	}
	switch f.Type {
	case "service_account":
		return idtoken.NewTokenSource(ctx, audience, option.WithCredentialsJSON(raw), option.WithHTTPClient(a.client()))
	case "authorized_user":
		return oauth2.ReuseTokenSource(nil, &userIDTokens{ctx: ctx, f: f, hc: a.client()}), nil
	case "impersonated_service_account":
		sa, err := impersonatedAccount(f.ServiceAccountImpersonationURL)
		if err != nil {
			return nil, err
		}
		ts, err := base(f.SourceCredentials)
		if err != nil {
			return nil, err
		}
		return a.impersonate(ctx, ts, sa, audience)
	case "external_account":
		if f.ServiceAccountImpersonationURL == "" {
			return nil, errors.New("an external account (Workload Identity Federation) cannot get an ID token by itself: " +
				"impersonate a service account (--impersonate-service-account, or service_account_impersonation_url in its configuration)")
		}
		sa, err := impersonatedAccount(f.ServiceAccountImpersonationURL)
		if err != nil {
			return nil, err
		}
		// The federated token itself impersonates the account: the
		// configuration's own impersonation would yield an access
		// token of the account, not an ID token.
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, err
		}
		delete(m, "service_account_impersonation_url")
		federated, _ := json.Marshal(m)
		ts, err := base(federated)
		if err != nil {
			return nil, err
		}
		return a.impersonate(ctx, ts, sa, audience)
	}
	return nil, fmt.Errorf("credentials of type %q cannot get an ID token", f.Type)
}

func (a Auth) client() *http.Client {
	if a.HTTPClient != nil {
		return a.HTTPClient
	}
	return http.DefaultClient
}

// impersonatedAccount returns the service account an impersonation URL
// names (…/serviceAccounts/SA:generateAccessToken).
func impersonatedAccount(u string) (string, error) {
	_, rest, ok := strings.Cut(u, "/serviceAccounts/")
	sa, _, _ := strings.Cut(rest, ":")
	if !ok || sa == "" {
		return "", fmt.Errorf("credentials: no service account in the impersonation URL %q", u)
	}
	return sa, nil
}

// impersonate mints ID tokens for audience as sa with Google's
// impersonate package, its IAM Credentials calls authorised by base.
func (a Auth) impersonate(ctx context.Context, base oauth2.TokenSource, sa, audience string) (oauth2.TokenSource, error) {
	authorised := oauth2.NewClient(ctx, base) // over ctx's client: a.client()
	ts, err := impersonate.IDTokenSource(ctx, impersonate.IDTokenConfig{Audience: audience, TargetPrincipal: sa, IncludeEmail: true},
		option.WithHTTPClient(authorised))
	if err != nil {
		return nil, fmt.Errorf("impersonating %s: %w", sa, err)
	}
	return hinted{ts, "impersonating " + sa + " (the credentials need roles/iam.serviceAccountOpenIdTokenCreator on it)"}, nil
}

// hinted says what a failing token source was doing, and what it needs.
type hinted struct {
	oauth2.TokenSource
	hint string
}

func (h hinted) Token() (*oauth2.Token, error) {
	t, err := h.TokenSource.Token()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", h.hint, err)
	}
	return t, nil
}

// userIDTokens are the ID tokens Google's token endpoint returns when a
// user's refresh token is exchanged.
type userIDTokens struct {
	ctx context.Context
	f   credentialsFile
	hc  *http.Client
}

func (t *userIDTokens) Token() (*oauth2.Token, error) {
	tokenURL := t.f.TokenURI
	if tokenURL == "" {
		tokenURL = defaultTokenURL
	}
	form := url.Values{"grant_type": {"refresh_token"}, "client_id": {t.f.ClientID}, "client_secret": {t.f.ClientSecret},
		"refresh_token": {t.f.RefreshToken}}
	req, err := http.NewRequestWithContext(t.ctx, http.MethodPost, tokenURL, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	var out struct {
		IDToken string `json:"id_token"`
	}
	if err := doJSON(t.hc, req, &out); err != nil {
		return nil, fmt.Errorf("an ID token from the user's login (gcloud auth application-default login again?): %w", err)
	}
	if out.IDToken == "" {
		return nil, errors.New("the token endpoint returned no ID token for the user's login: log in again with gcloud auth application-default login")
	}
	return idTokenOf(out.IDToken)
}

// doJSON sends req and decodes a 2xx answer into v.
func doJSON(hc *http.Client, req *http.Request, v any) error {
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return &httpStatusError{code: resp.StatusCode, msg: fmt.Sprintf("%s: %s", resp.Status, strings.TrimSpace(string(body)))}
	}
	return json.Unmarshal(body, v)
}

// httpStatusError is an endpoint's answer other than 2xx.
type httpStatusError struct {
	code int
	msg  string
}

func (e *httpStatusError) Error() string { return e.msg }

// idTokenOf wraps an ID token, expiring a minute before its exp claim.
func idTokenOf(tok string) (*oauth2.Token, error) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return nil, errors.New("the ID token is not a JWT")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return nil, fmt.Errorf("the ID token's payload: %w", err)
	}
	var claims struct {
		Exp int64 `json:"exp"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil {
		return nil, fmt.Errorf("the ID token's claims: %w", err)
	}
	return &oauth2.Token{AccessToken: tok, TokenType: "Bearer", Expiry: time.Unix(claims.Exp, 0).Add(-time.Minute)}, nil
}
