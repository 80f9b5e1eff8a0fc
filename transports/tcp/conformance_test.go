package tcp_test

import (
	"testing"

	"github.com/kvconnect/kvconnect/plugins"
	"github.com/kvconnect/kvconnect/plugins/transporttest"
	"github.com/kvconnect/kvconnect/transports/tcp"
)

func TestConformanceInProcess(t *testing.T) {
	transporttest.Run(t, transporttest.Harness{
		New: func(t *testing.T) plugins.Transport { return tcp.New() },
	})
}
