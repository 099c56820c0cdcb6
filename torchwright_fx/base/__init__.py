"""The base layer: what every other layer may import (errors, numeric constants, the machines)."""
