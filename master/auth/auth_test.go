package auth

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cloudbrowser-go/cloudbrowser/master/state"
)

// TestCheck: who each token acts as, and what each role lets through;
// the dashboard cookie acts as the admin, a change needing the CSRF header.
func TestCheck(t *testing.T) {
	st, err := state.Open("")
	if err != nil {
		t.Fatal(err)
	}
	a, err := New(Config{State: st, Now: time.Now, Login: DefaultLoginLimits(), Secret: "s3cret-s3cret-s3cret-s3cret-s3cret",
		Tokens: Tokens{Admin: "adm", Author: "aut", Jobs: "job"}, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	bob, err := a.Authors().Add("bob", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cookie := &http.Cookie{Name: AdminCookie, Value: a.Dashboard().Issue()}
	for _, tc := range []struct {
		name, token, method string
		cookie              bool
		need                Role
		want                Principal
		status              int // 0 = let through
	}{
		{"admin", "adm", "GET", false, RoleAdmin, AdminPrincipal, 0},
		{"shared author", "aut", "GET", false, RoleAuthor, Principal{Name: SharedAuthor}, 0},
		{"shared author, admin endpoint", "aut", "GET", false, RoleAdmin, Principal{}, http.StatusForbidden},
		{"per-author token", bob, "POST", false, RoleAuthor, Principal{Name: "bob"}, 0},
		{"jobs token", "job", "GET", false, RoleJobs, Principal{Name: JobsPrincipal, JobsOnly: true}, 0},
		{"jobs token, author endpoint", "job", "GET", false, RoleAuthor, Principal{}, http.StatusForbidden},
		{"no token", "", "GET", false, RoleJobs, Principal{}, http.StatusUnauthorized},
		{"wrong token", "nope", "GET", false, RoleJobs, Principal{}, http.StatusUnauthorized},
		{"dashboard cookie", "", "GET", true, RoleAdmin, AdminPrincipal, 0},
		{"dashboard cookie, change without the header", "", "POST", true, RoleAdmin, Principal{}, http.StatusForbidden},
	} {
		r := httptest.NewRequest(tc.method, "/api/v1/x", nil)
		if tc.token != "" {
			r.Header.Set("Authorization", "Bearer "+tc.token)
		}
		if tc.cookie {
			r.AddCookie(cookie)
		}
		p, refused := a.Check(r, tc.need)
		switch {
		case tc.status == 0 && (refused != nil || p != tc.want):
			t.Errorf("%s: got %+v, refused %+v; want %+v", tc.name, p, refused, tc.want)
		case tc.status != 0 && (refused == nil || refused.Status != tc.status):
			t.Errorf("%s: refused %+v, want status %d", tc.name, refused, tc.status)
		}
	}
}
