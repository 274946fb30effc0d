package hasher

import (
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"testing"

	"github.com/annexd/annexd/key"
)

// childEnv makes the test binary act as a helper process instead of running
// tests.
const childEnv = "HASHER_TEST_CHILD"

func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "":
		os.Exit(m.Run())
	case "hashfile":
		// Hash os.Args[len-1] and print the digest or the error.
		res, err := HashFile(context.Background(), os.Args[len(os.Args)-1], key.SHA256)
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println(hex.EncodeToString(res.Digest))
		os.Exit(0)
	}
	fmt.Fprintln(os.Stderr, "unknown", childEnv)
	os.Exit(2)
}
