//! What a model call reserves before it is sent and what settles it after, pure (AFE.md, "Money").
//!
//! The reservation is an upper estimate, so that a budget is never passed by a call in flight:
//! the request's size at three bytes a token (English averages nearer four, code fewer, so three
//! rarely under-counts) at the model's input price, plus the answer's limit (`maxTokens`, or
//! [`DEFAULT_ANSWER_TOKENS`]) at its output price. A model without a price reserves
//! [`UNPRICED_CALL_MICROS`]. The settlement is what the provider reported: its cost when it says
//! one (OpenRouter's `usage.cost`), else its token counts at the model's price, else — nothing
//! known — the reservation itself, so a call is never counted as free without evidence.

use afe_config::kinds::Price;
use afe_model::Usage;
use afe_store::Settlement;

/// The answer's length a reservation assumes when the agent sets no `maxTokens`.
pub const DEFAULT_ANSWER_TOKENS: u64 = 4096;
/// What a call of a model without a price reserves: five cents.
pub const UNPRICED_CALL_MICROS: i64 = 50_000;
/// Bytes a token is assumed to take in an estimate.
const BYTES_PER_TOKEN: u64 = 3;

fn micros(tokens: u64, per_million_usd: f64) -> f64 {
    // Dollars per million tokens times tokens is micro-dollars.
    tokens as f64 * per_million_usd
}

/// The reservation of a call whose request body is `request_bytes` long.
pub fn estimate(price: Option<&Price>, request_bytes: usize, max_tokens: Option<u32>) -> i64 {
    let Some(price) = price else {
        return UNPRICED_CALL_MICROS;
    };
    let prompt = (request_bytes as u64).div_ceil(BYTES_PER_TOKEN);
    let answer = max_tokens.map_or(DEFAULT_ANSWER_TOKENS, u64::from);
    (micros(prompt, price.input) + micros(answer, price.output)).ceil() as i64
}

/// The settlement of `reservation` (reserved `reserved` micro-dollars) for a call that used
/// `usage`.
pub fn settlement(
    reservation: i64,
    reserved: i64,
    price: Option<&Price>,
    usage: Option<&Usage>,
) -> Settlement {
    let (tokens_in, tokens_out) = usage.map_or((0, 0), |u| (u.prompt_tokens, u.completion_tokens));
    let usd_micros = match (usage.and_then(|u| u.cost_usd), usage, price) {
        (Some(cost), _, _) => (cost * 1e6).round() as i64,
        (None, Some(_), Some(price)) => {
            (micros(tokens_in, price.input) + micros(tokens_out, price.output)).round() as i64
        }
        _ => reserved,
    };
    Settlement {
        reservation,
        usd_micros,
        tokens_in: tokens_in as i64,
        tokens_out: tokens_out as i64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SONNET: Price = Price {
        input: 3.0,
        output: 15.0,
    };

    #[test]
    fn a_reservation_covers_the_request_and_the_longest_answer() {
        // 3,000 bytes ≈ 1,000 tokens at $3/M = 3,000 µ$; 1,000 answer tokens at $15/M = 15,000 µ$.
        assert_eq!(estimate(Some(&SONNET), 3000, Some(1000)), 18_000);
        assert_eq!(
            estimate(Some(&SONNET), 0, None),
            (DEFAULT_ANSWER_TOKENS as f64 * 15.0) as i64
        );
        assert_eq!(estimate(None, 1 << 20, Some(1)), UNPRICED_CALL_MICROS);
        let free = Price {
            input: 0.0,
            output: 0.0,
        };
        assert_eq!(estimate(Some(&free), 5000, None), 0);
    }

    #[test]
    fn a_settlement_is_what_the_provider_reported_and_never_free_without_evidence() {
        let usage = |cost| Usage {
            prompt_tokens: 1000,
            completion_tokens: 100,
            cost_usd: cost,
        };
        assert_eq!(
            settlement(7, 18_000, Some(&SONNET), Some(&usage(Some(0.0042)))),
            Settlement {
                reservation: 7,
                usd_micros: 4200,
                tokens_in: 1000,
                tokens_out: 100
            }
        );
        // No cost: the tokens at the price: 1,000 × 3 + 100 × 15.
        assert_eq!(
            settlement(7, 18_000, Some(&SONNET), Some(&usage(None))).usd_micros,
            4500
        );
        // Nothing known: the reservation stands.
        assert_eq!(
            settlement(7, 18_000, None, Some(&usage(None))).usd_micros,
            18_000
        );
        assert_eq!(
            settlement(7, 18_000, Some(&SONNET), None).usd_micros,
            18_000
        );
    }
}
