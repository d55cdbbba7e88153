package testsvc

import (
	"testing"

	"github.com/idemhq/idem/internal/mariadbproc"
)

// MariaDBServerBinaries skips t (or fails it under IDEM_REQUIRE_SERVICES=1) when a
// private MariaDB server (package mariadbproc) cannot be started here: for tests
// of code that starts its own, such as `idem verify --db mysql:`.
func MariaDBServerBinaries(t testing.TB) {
	t.Helper()
	if err := mariadbproc.Available(); err != nil {
		if Required() {
			t.Fatalf("private MariaDB: %v", err)
		}
		t.Skipf("private MariaDB: %v", err)
	}
}
