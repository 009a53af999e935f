//! Connection IDs of one connection: the ones this endpoint issued to the peer and the ones
//! the peer issued to it, each kept per path ID.
//!
//= https://www.rfc-editor.org/rfc/rfc9000#section-5.1
//# Each connection possesses a set of connection identifiers, or
//# connection IDs, each of which can identify the connection.
//
//= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-3.2
//# Each path ID has its own connection ID sequence number space whose initial value is 0.
//
// So both sets are keyed by path ID; without multipath everything lives under path 0.

use crate::TransportError;
use crate::shared::{ConnectionId, PathId, ResetToken};
use std::collections::BTreeMap;

/// A connection ID this endpoint issued, with what the peer needs to know about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IssuedCid {
    /// The path the ID belongs to.
    pub path_id: PathId,
    /// Its sequence number within the path's sequence number space.
    pub sequence: u64,
    /// The ID itself.
    pub cid: ConnectionId,
    /// The stateless reset token bound to it.
    pub reset_token: ResetToken,
}

/// The connection IDs this endpoint has issued, per path.
#[derive(Debug, Default)]
pub struct LocalCids {
    paths: BTreeMap<PathId, LocalPathCids>,
}

#[derive(Debug, Default)]
struct LocalPathCids {
    /// Active (issued, not yet retired) IDs by sequence number.
    active: BTreeMap<u64, IssuedCid>,
    /// Next sequence number to issue.
    next_sequence: u64,
    /// Retire Prior To value we last asked the peer to honour.
    retire_prior_to: u64,
}

impl LocalCids {
    /// Records a newly issued ID for `path_id` and returns it with its sequence number.
    pub fn issue(
        &mut self,
        path_id: PathId,
        cid: ConnectionId,
        reset_token: ResetToken,
    ) -> IssuedCid {
        let path = self.paths.entry(path_id).or_default();
        let issued = IssuedCid {
            path_id,
            sequence: path.next_sequence,
            cid,
            reset_token,
        };
        path.active.insert(issued.sequence, issued);
        path.next_sequence += 1;
        issued
    }

    /// Number of IDs currently active for `path_id`.
    pub fn active_count(&self, path_id: PathId) -> usize {
        self.paths.get(&path_id).map_or(0, |p| p.active.len())
    }

    /// Next sequence number that would be issued for `path_id`.
    pub fn next_sequence(&self, path_id: PathId) -> u64 {
        self.paths.get(&path_id).map_or(0, |p| p.next_sequence)
    }

    /// Looks up an issued ID that is still active.
    pub fn get(&self, path_id: PathId, sequence: u64) -> Option<&IssuedCid> {
        self.paths.get(&path_id)?.active.get(&sequence)
    }

    /// The Retire Prior To value for the path.
    pub fn retire_prior_to(&self, path_id: PathId) -> u64 {
        self.paths.get(&path_id).map_or(0, |p| p.retire_prior_to)
    }

    /// Handles the peer retiring one of our IDs, returning the retired ID (the endpoint stops
    /// routing it).
    ///
    //= https://www.rfc-editor.org/rfc/rfc9000#section-19.16
    //# Receipt of a RETIRE_CONNECTION_ID frame containing a sequence number
    //# greater than any previously sent to the peer MUST be treated as a
    //# connection error of type PROTOCOL_VIOLATION.
    //
    //= https://www.rfc-editor.org/rfc/rfc9000#section-19.16
    //# The sequence number specified in a RETIRE_CONNECTION_ID frame MUST
    //# NOT refer to the Destination Connection ID field of the packet in
    //# which the frame is contained.  The peer MAY treat this as a
    //# connection error of type PROTOCOL_VIOLATION.
    pub fn on_retire(
        &mut self,
        path_id: PathId,
        sequence: u64,
        packet_dcid: &ConnectionId,
    ) -> Result<Option<IssuedCid>, TransportError> {
        let Some(path) = self.paths.get_mut(&path_id) else {
            return Err(TransportError::protocol_violation(format!(
                "retired a connection ID of {path_id:?}, for which none was issued"
            )));
        };
        if sequence >= path.next_sequence {
            return Err(TransportError::protocol_violation(format!(
                "retired connection ID sequence {sequence} was never issued on {path_id:?}"
            )));
        }
        if let Some(entry) = path.active.get(&sequence)
            && entry.cid == *packet_dcid
        {
            return Err(TransportError::protocol_violation(
                "retired the connection ID the packet was sent to",
            ));
        }
        Ok(path.active.remove(&sequence))
    }

    /// Forgets every ID of a path (when the path's state is finally discarded), returning them.
    pub fn remove_path(&mut self, path_id: PathId) -> Vec<IssuedCid> {
        self.paths
            .remove(&path_id)
            .map(|p| p.active.into_values().collect())
            .unwrap_or_default()
    }

    /// The path an active local ID belongs to.
    pub fn path_of(&self, cid: &ConnectionId) -> Option<PathId> {
        self.paths
            .iter()
            .find(|(_, p)| p.active.values().any(|c| c.cid == *cid))
            .map(|(id, _)| *id)
    }

    /// All active IDs of all paths.
    pub fn all(&self) -> impl Iterator<Item = &IssuedCid> {
        self.paths.values().flat_map(|p| p.active.values())
    }
}

/// A connection ID the peer issued to us.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCid {
    /// Sequence number within its path.
    pub sequence: u64,
    /// The ID.
    pub cid: ConnectionId,
    /// The reset token bound to it, if the peer sent one (the handshake ID has none unless
    /// the server's transport parameters carry it).
    pub reset_token: Option<ResetToken>,
}

/// What happened when the peer issued a new connection ID.
#[derive(Debug, Default)]
pub struct NewCidOutcome {
    /// Sequence numbers we must now retire (because of Retire Prior To), to be sent in
    /// RETIRE_CONNECTION_ID / PATH_RETIRE_CONNECTION_ID frames.
    pub to_retire: Vec<u64>,
    /// True if the ID in use on the path was among those retired, so the path must switch
    /// to another one.
    pub active_retired: bool,
}

/// The connection IDs the peer issued to us, per path.
#[derive(Debug)]
pub struct PeerCids {
    limit: u64,
    paths: BTreeMap<PathId, PeerPathCids>,
}

#[derive(Debug, Default)]
struct PeerPathCids {
    /// The ID currently used as destination on this path.
    active: Option<PeerCid>,
    /// Spare IDs, by sequence number.
    spare: BTreeMap<u64, PeerCid>,
    /// Largest Retire Prior To seen.
    retire_prior_to: u64,
    /// Sequence numbers already retired (so a late NEW_CONNECTION_ID for them is ignored);
    /// bounded by `retire_prior_to` plus the few retired individually above it.
    retired_above_floor: Vec<u64>,
    /// Highest sequence number seen.
    highest_sequence: Option<u64>,
}

impl PeerCids {
    /// Creates the set with the local active_connection_id_limit (the most IDs we accept
    /// per path).
    pub fn new(active_connection_id_limit: u64) -> Self {
        PeerCids {
            limit: active_connection_id_limit.max(2),
            paths: BTreeMap::new(),
        }
    }

    /// Installs the ID used during the handshake (sequence 0 of path 0).
    pub fn set_handshake_cid(&mut self, cid: ConnectionId, reset_token: Option<ResetToken>) {
        let path = self.paths.entry(PathId::ZERO).or_default();
        path.active = Some(PeerCid {
            sequence: 0,
            cid,
            reset_token,
        });
        path.highest_sequence = Some(path.highest_sequence.unwrap_or(0));
    }

    /// Sets the reset token of the handshake ID once the server's transport parameters
    /// arrive.
    pub fn set_handshake_reset_token(&mut self, token: ResetToken) {
        if let Some(path) = self.paths.get_mut(&PathId::ZERO)
            && let Some(active) = path.active.as_mut()
            && active.sequence == 0
        {
            active.reset_token = Some(token);
        }
    }

    /// The destination ID currently in use on a path.
    pub fn active(&self, path_id: PathId) -> Option<&PeerCid> {
        self.paths.get(&path_id)?.active.as_ref()
    }

    /// True if the path has an unused ID to start using (opening a path needs one).
    pub fn has_spare(&self, path_id: PathId) -> bool {
        self.paths
            .get(&path_id)
            .is_some_and(|p| !p.spare.is_empty())
    }

    /// Highest sequence number received for a path, plus one.
    pub fn next_expected_sequence(&self, path_id: PathId) -> u64 {
        self.paths
            .get(&path_id)
            .and_then(|p| p.highest_sequence)
            .map_or(0, |s| s + 1)
    }

    /// Handles NEW_CONNECTION_ID / PATH_NEW_CONNECTION_ID.
    //= https://www.rfc-editor.org/rfc/rfc9000#section-19.15
    //# If an endpoint receives a NEW_CONNECTION_ID frame that repeats a
    //# previously issued connection ID with a different Stateless Reset
    //# Token field value or a different Sequence Number field value, or if a
    //# sequence number is used for different connection IDs, the endpoint
    //# MAY treat that receipt as a connection error of type
    //# PROTOCOL_VIOLATION.
    pub fn on_new_cid(
        &mut self,
        path_id: PathId,
        sequence: u64,
        retire_prior_to: u64,
        cid: ConnectionId,
        reset_token: ResetToken,
    ) -> Result<NewCidOutcome, TransportError> {
        let limit = self.limit;
        let path = self.paths.entry(path_id).or_default();
        let mut outcome = NewCidOutcome::default();
        let new = PeerCid {
            sequence,
            cid,
            reset_token: Some(reset_token),
        };

        let known = path
            .active
            .iter()
            .chain(path.spare.values())
            .find(|c| c.sequence == sequence);
        if let Some(existing) = known {
            if existing.cid != cid || existing.reset_token != Some(reset_token) {
                return Err(TransportError::protocol_violation(
                    "sequence number reused for a different connection ID",
                ));
            }
            return Ok(outcome);
        }
        path.highest_sequence = Some(path.highest_sequence.map_or(sequence, |h| h.max(sequence)));

        //= https://www.rfc-editor.org/rfc/rfc9000#section-19.15
        //# Receiving a value in the Retire Prior To field that is greater than
        //# that in the Sequence Number field MUST be treated as a connection
        //# error of type FRAME_ENCODING_ERROR.
        // (checked by the frame decoder)

        //= https://www.rfc-editor.org/rfc/rfc9000#section-19.15
        //# An endpoint that receives a NEW_CONNECTION_ID frame with a sequence
        //# number smaller than the Retire Prior To field of a previously
        //# received NEW_CONNECTION_ID frame MUST send a corresponding
        //# RETIRE_CONNECTION_ID frame that retires the newly received connection
        //# ID, unless it has already done so for that sequence number.
        if sequence < path.retire_prior_to || path.retired_above_floor.contains(&sequence) {
            if !path.retired_above_floor.contains(&sequence) && sequence >= path.retire_prior_to {
                path.retired_above_floor.push(sequence);
            }
            outcome.to_retire.push(sequence);
            return Ok(outcome);
        }

        if retire_prior_to > path.retire_prior_to {
            path.retire_prior_to = retire_prior_to;
            let stale: Vec<u64> = path
                .spare
                .range(..retire_prior_to)
                .map(|(s, _)| *s)
                .collect();
            for s in stale {
                path.spare.remove(&s);
                outcome.to_retire.push(s);
            }
            if let Some(active) = path.active
                && active.sequence < retire_prior_to
            {
                outcome.to_retire.push(active.sequence);
                outcome.active_retired = true;
                path.active = None;
            }
            path.retired_above_floor.retain(|s| *s >= retire_prior_to);
        }

        path.spare.insert(sequence, new);
        if path.active.is_none() {
            path.active = path.spare.pop_first().map(|(_, c)| c);
        }

        //= https://www.rfc-editor.org/rfc/rfc9000#section-5.1.1
        //# After processing a NEW_CONNECTION_ID frame and
        //# adding and retiring active connection IDs, if the number of active
        //# connection IDs exceeds the value advertised in its
        //# active_connection_id_limit transport parameter, an endpoint MUST
        //# close the connection with an error of type CONNECTION_ID_LIMIT_ERROR.
        let active = path.spare.len() as u64 + u64::from(path.active.is_some());
        if active > limit {
            return Err(TransportError::connection_id_limit(format!(
                "peer issued {active} active connection IDs for {path_id:?}, limit is {limit}"
            )));
        }
        Ok(outcome)
    }

    /// Switches a path to a spare ID (for example when the peer migrated, or to start a new
    /// path), retiring the old one. Returns the retired sequence number, if there was an
    /// active ID, or `None` when no spare exists (the path keeps its current ID).
    pub fn rotate(&mut self, path_id: PathId) -> Option<Option<u64>> {
        let path = self.paths.get_mut(&path_id)?;
        let (_, next) = path.spare.pop_first()?;
        let old = path.active.replace(next).map(|c| c.sequence);
        if let Some(s) = old {
            path.retired_above_floor.push(s);
        }
        Some(old)
    }

    /// The spare ID [`PeerCids::rotate`] would take next: the one to probe another
    /// 4-tuple of the path with before the path moves there.
    pub fn next_spare(&self, path_id: PathId) -> Option<PeerCid> {
        self.paths
            .get(&path_id)?
            .spare
            .first_key_value()
            .map(|(_, c)| *c)
    }

    /// Takes a spare ID into use on a path that has none active yet (a new path).
    pub fn activate(&mut self, path_id: PathId) -> Option<PeerCid> {
        let path = self.paths.get_mut(&path_id)?;
        if path.active.is_none() {
            path.active = path.spare.pop_first().map(|(_, c)| c);
        }
        path.active
    }

    /// Retires every ID of a path (on PATH_ABANDON), returning their sequence numbers.
    ///
    //= https://datatracker.ietf.org/doc/html/draft-ietf-quic-multipath-21#section-3.4
    //# Endpoints that send a PATH_ABANDON frame MUST treat all connection
    //# IDs received from the peer for the path ID indicated in the PATH_ABANDON as immediately
    //# retired, and subsequently cannot send any packet on that path anymore.
    pub fn retire_path(&mut self, path_id: PathId) -> Vec<u64> {
        self.paths
            .remove(&path_id)
            .map(|p| {
                p.active
                    .into_iter()
                    .chain(p.spare.into_values())
                    .map(|c| c.sequence)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// True if `token` is the reset token of any ID the peer issued and we have not retired.
    //= https://www.rfc-editor.org/rfc/rfc9000#section-10.3.1
    //# An endpoint MUST NOT check for any stateless reset tokens associated
    //# with connection IDs it has not used or for connection IDs that have
    //# been retired.
    pub fn is_reset_token(&self, token: &[u8]) -> bool {
        self.paths
            .values()
            .filter_map(|p| p.active.as_ref())
            .any(|c| c.reset_token.is_some_and(|t| t.ct_eq(token)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TransportErrorCode;

    fn cid(b: u8) -> ConnectionId {
        ConnectionId::new(&[b; 8])
    }

    #[test]
    fn retire_prior_to_retires_active_and_spares() {
        let mut peer = PeerCids::new(4);
        peer.set_handshake_cid(cid(0), None);
        peer.on_new_cid(PathId::ZERO, 1, 0, cid(1), ResetToken([1; 16]))
            .unwrap();
        let out = peer
            .on_new_cid(PathId::ZERO, 2, 2, cid(2), ResetToken([2; 16]))
            .unwrap();
        assert_eq!(out.to_retire, vec![1, 0]);
        assert!(out.active_retired);
        assert_eq!(peer.active(PathId::ZERO).unwrap().sequence, 2);
        // A late frame below the floor is retired at once.
        let late = peer
            .on_new_cid(PathId::ZERO, 1, 0, cid(1), ResetToken([1; 16]))
            .unwrap();
        assert_eq!(late.to_retire, vec![1]);
    }

    #[test]
    fn exceeding_the_limit_is_an_error() {
        let mut peer = PeerCids::new(2);
        peer.set_handshake_cid(cid(0), None);
        peer.on_new_cid(PathId::ZERO, 1, 0, cid(1), ResetToken([1; 16]))
            .unwrap();
        let err = peer
            .on_new_cid(PathId::ZERO, 2, 0, cid(2), ResetToken([2; 16]))
            .unwrap_err();
        assert_eq!(err.code, TransportErrorCode::CONNECTION_ID_LIMIT_ERROR);
    }

    #[test]
    fn reused_sequence_is_a_violation() {
        let mut peer = PeerCids::new(4);
        peer.on_new_cid(PathId(1), 0, 0, cid(1), ResetToken([1; 16]))
            .unwrap();
        let err = peer
            .on_new_cid(PathId(1), 0, 0, cid(9), ResetToken([1; 16]))
            .unwrap_err();
        assert_eq!(err.code, TransportErrorCode::PROTOCOL_VIOLATION);
        // The identical frame again is fine.
        peer.on_new_cid(PathId(1), 0, 0, cid(1), ResetToken([1; 16]))
            .unwrap();
    }

    #[test]
    fn local_retire_checks() {
        let mut local = LocalCids::default();
        local.issue(PathId::ZERO, cid(0), ResetToken([0; 16]));
        local.issue(PathId::ZERO, cid(1), ResetToken([1; 16]));
        let err = local.on_retire(PathId::ZERO, 5, &cid(0)).unwrap_err();
        assert_eq!(err.code, TransportErrorCode::PROTOCOL_VIOLATION);
        let err = local.on_retire(PathId::ZERO, 0, &cid(0)).unwrap_err();
        assert_eq!(err.code, TransportErrorCode::PROTOCOL_VIOLATION);
        assert_eq!(
            local
                .on_retire(PathId::ZERO, 0, &cid(1))
                .unwrap()
                .unwrap()
                .cid,
            cid(0)
        );
        assert_eq!(local.active_count(PathId::ZERO), 1);
        assert_eq!(local.path_of(&cid(1)), Some(PathId::ZERO));
    }

    #[test]
    fn reset_tokens_only_for_active_ids() {
        let mut peer = PeerCids::new(4);
        peer.set_handshake_cid(cid(0), Some(ResetToken([7; 16])));
        peer.on_new_cid(PathId::ZERO, 1, 0, cid(1), ResetToken([8; 16]))
            .unwrap();
        assert!(peer.is_reset_token(&[7; 16]));
        assert!(
            !peer.is_reset_token(&[8; 16]),
            "spare IDs not yet used must not match"
        );
    }
}
