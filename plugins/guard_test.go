package plugins

import (
	"errors"
	"testing"
)

func TestGuardLifecycle(t *testing.T) {
	var g Guard
	if err := g.Up("x"); !errors.Is(err, ErrNotInitialized) {
		t.Fatalf("Up before Init: %v", err)
	}
	if err := g.BeginInit("x"); err != nil {
		t.Fatal(err)
	}
	if err := g.BeginInit("x"); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Init while Init runs: %v", err)
	}
	if err := g.EndInit("x", false); err != nil {
		t.Fatal(err)
	}
	if err := g.BeginInit("x"); err != nil {
		t.Fatalf("retry after a failed Init: %v", err)
	}
	if err := g.EndInit("x", true); err != nil || g.Up("x") != nil {
		t.Fatalf("after Init: %v / %v", err, g.Up("x"))
	}
	if err := g.BeginInit("x"); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("Init twice: %v", err)
	}
	if first, wasUp := g.BeginClose(); !first || !wasUp {
		t.Fatalf("BeginClose = %v, %v", first, wasUp)
	}
	if first, _ := g.BeginClose(); first {
		t.Fatal("second BeginClose is first")
	}
	if err := g.Up("x"); !errors.Is(err, ErrClosed) || !g.Closed() {
		t.Fatalf("Up after Close: %v", err)
	}
	if err := g.BeginInit("x"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Init after Close: %v", err)
	}
}

func TestGuardCloseDuringInit(t *testing.T) {
	var g Guard
	if err := g.BeginInit("x"); err != nil {
		t.Fatal(err)
	}
	if first, wasUp := g.BeginClose(); !first || wasUp {
		t.Fatalf("BeginClose during Init = %v, %v", first, wasUp)
	}
	if err := g.EndInit("x", true); !errors.Is(err, ErrClosed) {
		t.Fatalf("EndInit after Close: %v, want ErrClosed", err)
	}
}
