package netboot

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// duplicate answers a report this node already stored: 200 with the stored report's
// id, so a node retrying after a lost answer (a replica killed after its commit, a
// timeout) learns its report is in, and the report is stored once.
func (s *Server) duplicate(w http.ResponseWriter, node string, id int64, verdict, sum string) {
	s.log.Info("report already stored (a retry)", "id", id, "node", node, "sha256", sum[:16])
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", fmt.Sprintf("/api/reports/%d", id))
	w.WriteHeader(http.StatusOK)
	json.NewEncoder(w).Encode(map[string]any{"id": id, "node": node, "verdict": verdict, "sha256": sum, "duplicate": true})
}
