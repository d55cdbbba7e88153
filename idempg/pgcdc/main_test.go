package pgcdc_test

import (
	"os"
	"testing"

	"github.com/idemhq/idem/internal/testsvc"
)

func TestMain(m *testing.M) { os.Exit(testsvc.MainWithLogicalPostgres(m)) }
