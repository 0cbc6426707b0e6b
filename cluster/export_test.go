package cluster

// die stops the node's heartbeat as a killed process would: no renewal,
// no deletion; it lapses after LeaseTTL.
func (c *Cluster) die() { c.leases.stopRenewing() }

// incarnation is the node's current one.
func (c *Cluster) incarnation() string {
	c.leases.mu.Lock()
	defer c.leases.mu.Unlock()
	return c.leases.incarnation
}
