package speaker

import "k8s.io/client-go/tools/cache"

// emptyStores are stores with no objects.
func emptyStores() stores {
	return stores{services: cache.NewStore(cache.MetaNamespaceKeyFunc), slices: cache.NewStore(cache.MetaNamespaceKeyFunc),
		nodes: cache.NewStore(cache.MetaNamespaceKeyFunc), pools: cache.NewStore(cache.MetaNamespaceKeyFunc),
		l2ads: cache.NewStore(cache.MetaNamespaceKeyFunc)}
}
