package auth_test

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/kvconnect/kvconnect/auth"
)

func sprintf(f string, a ...any) string { return fmt.Sprintf(f, a...) }

func hexOf(s auth.Secret) string { return hex.EncodeToString([]byte(s)) }

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
