//! The greedy selections (coverage and priority) and what they are scored by: the
//! responses' pairs, the pairs a selection collides and their released distance.

use std::collections::BTreeMap;

use super::Response;
use crate::codebook::Codeword;

/// Pairs: groups of exactly two responses sharing `pair_id` with the same selected class.
pub(super) fn pairs_of(responses: &[Response]) -> Vec<(u32, u32)> {
    let mut by_pair: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (r, response) in responses.iter().enumerate() {
        by_pair
            .entry(response.pair_id.as_str())
            .or_default()
            .push(r);
    }
    by_pair
        .values()
        .filter_map(|members| match members.as_slice() {
            [a, b] if responses[*a].native.choice == responses[*b].native.choice => {
                Some((u32::try_from(*a).ok()?, u32::try_from(*b).ok()?))
            }
            _ => None,
        })
        .collect()
}

/// The mapper's assignment under `chosen` (file order): every response goes to the first
/// chosen codeword that admits it. Returns (pairs both of whose members go to the same
/// codeword, responses assigned at all).
pub(super) fn collisions(
    chosen: &[usize],
    covers: &[Vec<u32>],
    pairs: &[(u32, u32)],
    responses: usize,
) -> (usize, usize) {
    let mut assigned: Vec<Option<usize>> = vec![None; responses];
    for (position, &k) in chosen.iter().enumerate() {
        for &r in &covers[k] {
            let slot = &mut assigned[r as usize];
            if slot.is_none() {
                *slot = Some(position);
            }
        }
    }
    let collided = pairs
        .iter()
        .filter(|(a, b)| {
            let a = assigned[*a as usize];
            a.is_some() && a == assigned[*b as usize]
        })
        .count();
    (collided, assigned.iter().filter(|a| a.is_some()).count())
}

/// The mean L1 distance between the released probability vectors of the two members of each
/// pair under `chosen` (file order: first admissible), in millionths (0 without pairs).
pub(super) fn pair_distance(
    chosen: &[usize],
    codewords: &[Codeword],
    covers: &[Vec<u32>],
    pairs: &[(u32, u32)],
    responses: &[Response],
) -> u64 {
    if pairs.is_empty() {
        return 0;
    }
    let mut released: Vec<Option<&[f64]>> = vec![None; responses.len()];
    for &k in chosen {
        for &r in &covers[k] {
            let slot = &mut released[r as usize];
            if slot.is_none() {
                *slot = Some(&codewords[k].p);
            }
        }
    }
    let vector = |r: u32| -> &[f64] {
        released[r as usize]
            .or(responses[r as usize].native.probabilities.as_deref())
            .unwrap_or(&[])
    };
    let total: f64 = pairs
        .iter()
        .map(|&(a, b)| {
            vector(a)
                .iter()
                .zip(vector(b))
                .map(|(x, y)| (x - y).abs())
                .sum::<f64>()
        })
        .sum();
    // Bounded by 2 per pair: the rounding to millionths cannot overflow.
    (total / pairs.len() as f64 * 1e6).round() as u64
}

/// Greedy coverage: each step picks the candidate with the largest gain = newly covered
/// responses + `pair_weight` × pairs not yet jointly covered whose two members it both covers
/// (ties: the earlier candidate); the kept codewords in strict order.
pub(super) fn select_coverage(
    covers: &[Vec<u32>],
    pairs: &[(u32, u32)],
    responses: usize,
    max_codewords: usize,
    pair_weight: u32,
) -> Vec<usize> {
    let pair_covers: Vec<Vec<u32>> = covers
        .iter()
        .map(|list| {
            (0u32..)
                .zip(pairs)
                .filter(|(_, (a, b))| {
                    list.binary_search(a).is_ok() && list.binary_search(b).is_ok()
                })
                .map(|(i, _)| i)
                .collect()
        })
        .collect();
    let mut covered = vec![false; responses];
    let mut joint = vec![false; pairs.len()];
    let mut taken = vec![false; covers.len()];
    let mut chosen: Vec<usize> = Vec::new();
    while chosen.len() < max_codewords {
        let mut best: Option<(u64, usize)> = None;
        for k in 0..covers.len() {
            if taken[k] {
                continue;
            }
            let new = covers[k].iter().filter(|&&r| !covered[r as usize]).count() as u64;
            let new_pairs = pair_covers[k]
                .iter()
                .filter(|&&p| !joint[p as usize])
                .count() as u64;
            let gain = new + u64::from(pair_weight) * new_pairs;
            if gain > 0 && best.is_none_or(|(g, _)| gain > g) {
                best = Some((gain, k));
            }
        }
        let Some((_, k)) = best else { break };
        taken[k] = true;
        chosen.push(k);
        for &r in &covers[k] {
            covered[r as usize] = true;
        }
        for &p in &pair_covers[k] {
            joint[p as usize] = true;
        }
    }
    chosen.sort_unstable();
    chosen
}

/// The privacy-targeting decision list ([`super::Assignment::Priority`]), in pick order.
pub(super) fn select_priority(
    covers: &[Vec<u32>],
    pairs: &[(u32, u32)],
    responses: usize,
    max_codewords: usize,
    pair_weight: u32,
    split_penalty: u32,
) -> Vec<usize> {
    // partner[r]: the other member of r's pair, if r is in one.
    let mut partner: Vec<Option<u32>> = vec![None; responses];
    for &(a, b) in pairs {
        partner[a as usize] = Some(b);
        partner[b as usize] = Some(a);
    }
    let mut assigned = vec![false; responses];
    let mut taken = vec![false; covers.len()];
    let mut chosen: Vec<usize> = Vec::new();
    while chosen.len() < max_codewords {
        let mut best: Option<(i64, usize)> = None;
        for k in 0..covers.len() {
            if taken[k] {
                continue;
            }
            let (mut new, mut collide_twice, mut split) = (0i64, 0i64, 0i64);
            for &r in &covers[k] {
                if assigned[r as usize] {
                    continue;
                }
                new += 1;
                if let Some(other) = partner[r as usize]
                    && !assigned[other as usize]
                {
                    if covers[k].binary_search(&other).is_ok() {
                        collide_twice += 1;
                    } else {
                        split += 1;
                    }
                }
            }
            if new == 0 {
                continue;
            }
            let gain = 2 * new + i64::from(pair_weight) * collide_twice
                - 2 * i64::from(split_penalty) * split;
            if best.is_none_or(|(g, _)| gain > g) {
                best = Some((gain, k));
            }
        }
        let Some((_, k)) = best else { break };
        taken[k] = true;
        chosen.push(k);
        for &r in &covers[k] {
            assigned[r as usize] = true;
        }
    }
    chosen
}
