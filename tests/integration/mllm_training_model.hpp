#pragma once
// The tiny multimodal model of the mllm_training integration program (mllm_training.cpp, whose
// file comment describes it): parameters, their initialisation, the vision encoder (with the
// per-group attention of --split videos), the audio encoder and the LLM-like backbone, forward
// and backward written by hand in plain C++20 + Eigen, double precision.

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bench/support/workload.hpp"

namespace mllm_training {

using Eigen::MatrixXd;
using Eigen::VectorXd;

constexpr int hidden = 8;           // H: encoder output rows and LLM width
constexpr int vocab = 32;           // token ids and targets in [0, vocab)
constexpr int mlp = 16;             // LLM MLP width
constexpr int max_positions = 320;  // learned position embeddings (sequences are <= 264 long)
constexpr int patch_dim = 12;       // values per image patch (one encoder input row)
constexpr int frame_dim = 6;        // values per audio frame
constexpr int patches_per_token = 2;
constexpr int frames_per_token = 3;
constexpr int vision = 0;  // modality index = encoder stage index
constexpr int audio = 1;
constexpr int num_encoders = 2;

/// All parameters (also used for their gradients: same shapes, zero-initialised).
struct model {
  MatrixXd tok_emb = MatrixXd::Zero(hidden, vocab);
  MatrixXd pos_emb = MatrixXd::Zero(hidden, max_positions);
  MatrixXd w1 = MatrixXd::Zero(mlp, 2 * hidden);
  MatrixXd b1 = MatrixXd::Zero(mlp, 1);
  MatrixXd w2 = MatrixXd::Zero(vocab, mlp);
  MatrixXd b2 = MatrixXd::Zero(vocab, 1);
  MatrixXd img_w = MatrixXd::Zero(hidden, patch_dim);
  MatrixXd img_b = MatrixXd::Zero(hidden, 1);
  MatrixXd aud_w = MatrixXd::Zero(hidden, frame_dim);
  MatrixXd aud_b = MatrixXd::Zero(hidden, 1);
  MatrixXd aud_u = MatrixXd::Zero(hidden, hidden);
  MatrixXd aud_v = MatrixXd::Zero(hidden, hidden);
  MatrixXd aud_c = MatrixXd::Zero(hidden, 1);
  MatrixXd img_q = MatrixXd::Zero(hidden, hidden);  // --split: per-segment attention query

  /// f(name, matrix) for every parameter matrix, in the fixed flattening order.
  template <class Self, class F>
  static void visit(Self& s, F&& f) {
    f("tok_emb", s.tok_emb);
    f("pos_emb", s.pos_emb);
    f("w1", s.w1);
    f("b1", s.b1);
    f("w2", s.w2);
    f("b2", s.b2);
    f("img_w", s.img_w);
    f("img_b", s.img_b);
    f("aud_w", s.aud_w);
    f("aud_b", s.aud_b);
    f("aud_u", s.aud_u);
    f("aud_v", s.aud_v);
    f("aud_c", s.aud_c);
    f("img_q", s.img_q);
  }

  [[nodiscard]] std::vector<double> flatten() const {
    std::vector<double> v;
    visit(*this, [&](const char*, const MatrixXd& m) {
      v.insert(v.end(), m.data(), m.data() + m.size());
    });
    return v;
  }
};

/// Parameters, identical on every rank: normal draws from a stream no rank uses for data.
inline model init_model(std::uint64_t seed) {
  orchmllm::bench::random_source rng(seed, 0x5eedf00dULL);
  model m;
  auto fill = [&](MatrixXd& x, double sd) {
    for (Eigen::Index i = 0; i < x.size(); ++i) x.data()[i] = rng.normal(0.0, sd);
  };
  fill(m.tok_emb, 0.5);
  fill(m.pos_emb, 0.3);
  fill(m.w1, 1.0 / std::sqrt(2.0 * hidden));
  fill(m.b1, 0.1);
  fill(m.w2, 1.0 / std::sqrt(static_cast<double>(mlp)));
  fill(m.b2, 0.1);
  fill(m.img_w, 1.0 / std::sqrt(static_cast<double>(patch_dim)));
  fill(m.img_b, 0.1);
  fill(m.aud_w, 1.0 / std::sqrt(static_cast<double>(frame_dim)));
  fill(m.aud_b, 0.1);
  fill(m.aud_u, 1.0 / std::sqrt(static_cast<double>(hidden)));
  fill(m.aud_v, 1.0 / std::sqrt(static_cast<double>(hidden)));
  fill(m.aud_c, 0.1);
  fill(m.img_q, 1.0 / std::sqrt(static_cast<double>(hidden)));  // drawn last: the others keep
  return m;
}

// Encoders. Input: one column per encoder input row (patch / frame); output: one column per LLM
// token (H rows). Stateless: the backward pass recomputes the forward activations.

inline MatrixXd vision_forward(const model& m, const MatrixXd& x) {
  const MatrixXd h = ((m.img_w * x).colwise() + m.img_b.col(0)).array().tanh().matrix();
  const Eigen::Index t = x.cols() / patches_per_token;
  MatrixXd out(hidden, t);
  for (Eigen::Index j = 0; j < t; ++j) out.col(j) = 0.5 * (h.col(2 * j) + h.col(2 * j + 1));
  return out;
}

inline void vision_backward(const model& m, const MatrixXd& x, const MatrixXd& dout, model& g) {
  const MatrixXd h = ((m.img_w * x).colwise() + m.img_b.col(0)).array().tanh().matrix();
  MatrixXd dh(hidden, x.cols());
  for (Eigen::Index j = 0; j < dout.cols(); ++j) {
    dh.col(2 * j) = 0.5 * dout.col(j);
    dh.col(2 * j + 1) = 0.5 * dout.col(j);
  }
  const MatrixXd da = (dh.array() * (1.0 - h.array().square())).matrix();
  g.img_w += da * x.transpose();
  g.img_b += da.rowwise().sum();
}

struct audio_activations {
  MatrixXd g;     // H × frames: tanh(A x + a)
  MatrixXd pool;  // H × tokens
  VectorXd mean;  // H: clip context
  MatrixXd out;   // H × tokens
};

inline audio_activations audio_activate(const model& m, const MatrixXd& x) {
  audio_activations a;
  a.g = ((m.aud_w * x).colwise() + m.aud_b.col(0)).array().tanh().matrix();
  const Eigen::Index t = x.cols() / frames_per_token;
  a.pool.resize(hidden, t);
  for (Eigen::Index j = 0; j < t; ++j)
    a.pool.col(j) =
        a.g.middleCols(frames_per_token * j, frames_per_token).rowwise().sum() / frames_per_token;
  a.mean = a.pool.rowwise().mean();
  const VectorXd ctx = m.aud_v * a.mean + m.aud_c.col(0);
  a.out = ((m.aud_u * a.pool).colwise() + ctx).array().tanh().matrix();
  return a;
}

inline MatrixXd audio_forward(const model& m, const MatrixXd& x) {
  return audio_activate(m, x).out;
}

inline void audio_backward(const model& m, const MatrixXd& x, const MatrixXd& dout, model& g) {
  const auto a = audio_activate(m, x);
  const MatrixXd dz = (dout.array() * (1.0 - a.out.array().square())).matrix();
  const VectorXd dz_sum = dz.rowwise().sum();
  g.aud_u += dz * a.pool.transpose();
  g.aud_v += dz_sum * a.mean.transpose();
  g.aud_c += dz_sum;
  const Eigen::Index t = a.pool.cols();
  const VectorXd dmean = m.aud_v.transpose() * dz_sum;
  MatrixXd dpool = m.aud_u.transpose() * dz;
  dpool.colwise() += dmean / static_cast<double>(t);
  MatrixXd dg(hidden, x.cols());
  for (Eigen::Index f = 0; f < x.cols(); ++f)
    dg.col(f) = dpool.col(f / frames_per_token) / frames_per_token;
  const MatrixXd da = (dg.array() * (1.0 - a.g.array().square())).matrix();
  g.aud_w += da * x.transpose();
  g.aud_b += da.rowwise().sum();
}

// --split: a video of S temporal groups (segments) of equal size. Every group is encoded on its
// own, as Qwen2-VL-style towers do: the patches as above (tanh, pairs averaged into tokens
// p_1..p_t), then one tiny attention over the group's own tokens only,
//   A = row-softmax((Q P)^T P / sqrt(H)),   out = P + P A^T,
// so a group's outputs depend on all of its tokens and on nothing outside the group; a video cut
// at group boundaries and encoded piece by piece gives exactly the same outputs.

inline MatrixXd segment_attention(const model& m, const MatrixXd& p, MatrixXd* a_out = nullptr) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(hidden));
  MatrixXd s = (m.img_q * p).transpose() * p * scale;  // t × t
  for (Eigen::Index j = 0; j < s.rows(); ++j) {
    const double mx = s.row(j).maxCoeff();
    s.row(j) = (s.row(j).array() - mx).exp().matrix();
    s.row(j) /= s.row(j).sum();
  }
  if (a_out) *a_out = s;
  return p + p * s.transpose();
}

// Vision over `segments` equal groups of x's columns.
inline MatrixXd video_forward(const model& m, const MatrixXd& x, std::int64_t segments) {
  const MatrixXd pooled = vision_forward(m, x);
  const Eigen::Index t = pooled.cols() / segments;
  MatrixXd out(hidden, pooled.cols());
  for (Eigen::Index s = 0; s < segments; ++s)
    out.middleCols(s * t, t) = segment_attention(m, pooled.middleCols(s * t, t));
  return out;
}

inline void video_backward(const model& m, const MatrixXd& x, const MatrixXd& dout,
                           std::int64_t segments, model& g) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(hidden));
  const MatrixXd pooled = vision_forward(m, x);
  const Eigen::Index t = pooled.cols() / segments;
  MatrixXd dpooled(hidden, pooled.cols());
  for (Eigen::Index s = 0; s < segments; ++s) {
    const MatrixXd p = pooled.middleCols(s * t, t);
    const MatrixXd d = dout.middleCols(s * t, t);
    MatrixXd a;
    segment_attention(m, p, &a);
    MatrixXd dp = d + d * a;                // out = P + P A^T
    const MatrixXd da = d.transpose() * p;  // dA[j][l] = dout_j . p_l
    MatrixXd ds = a.cwiseProduct(da);       // softmax backward, row by row
    const VectorXd rows = ds.rowwise().sum();
    ds = a.cwiseProduct(da.colwise() - rows);
    const MatrixXd qp = m.img_q * p;
    const MatrixXd dqp = p * ds.transpose() * scale;  // S = (Q P)^T P · scale
    dp += qp * ds * scale;
    g.img_q += dqp * p.transpose();
    dp += m.img_q.transpose() * dqp;
    dpooled.middleCols(s * t, t) = dp;
  }
  vision_backward(m, x, dpooled, g);
}

// `segments` > 0: the segmented (--split) vision encoder over that many groups.
inline MatrixXd encoder_forward(const model& m, int modality, const MatrixXd& x,
                                std::int64_t segments = 0) {
  if (modality == vision)
    return segments > 0 ? video_forward(m, x, segments) : vision_forward(m, x);
  return audio_forward(m, x);
}
inline void encoder_backward(const model& m, int modality, const MatrixXd& x, const MatrixXd& dout,
                             model& g, std::int64_t segments = 0) {
  if (modality == vision && segments > 0)
    video_backward(m, x, dout, segments, g);
  else if (modality == vision)
    vision_backward(m, x, dout, g);
  else
    audio_backward(m, x, dout, g);
}
constexpr int input_dim(int modality) { return modality == vision ? patch_dim : frame_dim; }

/// One text token of a sample as it travels to the LLM rank (16 bytes): its id and target, and
/// the sub-items inserted right after it (how many, and the target of their placeholder rows).
struct text_row {
  std::int32_t token;
  std::int32_t target;
  std::int32_t subs_after;
  std::int32_t sub_target;
};
static_assert(sizeof(text_row) == 16);

/// LLM forward + backward of one sample. `subs[j]` is the H × tokens output of the sample's j-th
/// sub-item (original order); they are inserted after the text tokens as `text` says. Adds the
/// parameter gradients of loss · inv_n to `g`, writes d(loss · inv_n)/d(subs[j]) to `dsubs[j]`
/// and returns the sample's summed (unnormalised) cross-entropy.
inline double llm_sample(const model& m, std::span<const text_row> text,
                         std::span<const MatrixXd* const> subs, double inv_n, model& g,
                         std::span<MatrixXd> dsubs) {
  Eigen::Index len = static_cast<Eigen::Index>(text.size());
  for (const auto* s : subs) len += s->cols();
  if (len > max_positions)
    throw std::runtime_error("sequence of " + std::to_string(len) + " tokens exceeds " +
                             std::to_string(max_positions) + " positions");
  // Assemble: x columns, targets, and where each column came from.
  MatrixXd u(hidden, len);
  std::vector<int> target(static_cast<std::size_t>(len));
  std::vector<int> token(static_cast<std::size_t>(len), -1);  // text: its id
  std::vector<std::pair<int, Eigen::Index>> origin(           // sub, col
      static_cast<std::size_t>(len), {-1, 0});
  Eigen::Index at = 0;
  std::size_t next_sub = 0;
  for (const auto& row : text) {
    u.col(at) = m.tok_emb.col(row.token);
    token[static_cast<std::size_t>(at)] = row.token;
    target[static_cast<std::size_t>(at)] = row.target;
    ++at;
    for (int k = 0; k < row.subs_after; ++k, ++next_sub) {
      if (next_sub >= subs.size())
        throw std::runtime_error("text rows announce more sub-items than arrived");
      const MatrixXd& s = *subs[next_sub];
      for (Eigen::Index c = 0; c < s.cols(); ++c, ++at) {
        u.col(at) = s.col(c);
        target[static_cast<std::size_t>(at)] = row.sub_target;
        origin[static_cast<std::size_t>(at)] = {static_cast<int>(next_sub), c};
      }
    }
  }
  if (next_sub != subs.size())
    throw std::runtime_error("sub-items arrived that no text row announces");
  u += m.pos_emb.leftCols(len);

  // Forward.
  MatrixXd z(2 * hidden, len);
  VectorXd run = VectorXd::Zero(hidden);
  for (Eigen::Index i = 0; i < len; ++i) {
    run += u.col(i);
    z.col(i).head(hidden) = u.col(i);
    z.col(i).tail(hidden) = run / static_cast<double>(i + 1);
  }
  const MatrixXd h = ((m.w1 * z).colwise() + m.b1.col(0)).array().tanh().matrix();
  MatrixXd y = (m.w2 * h).colwise() + m.b2.col(0);
  double loss = 0;
  for (Eigen::Index i = 0; i < len; ++i) {  // softmax in place; y becomes dy
    auto col = y.col(i);
    const double mx = col.maxCoeff();
    col = (col.array() - mx).exp().matrix();
    const double sum = col.sum();
    col /= sum;
    const int t = target[static_cast<std::size_t>(i)];
    loss -= std::log(col(t));
    col(t) -= 1.0;
  }
  const MatrixXd dy = y * inv_n;

  // Backward.
  g.w2 += dy * h.transpose();
  g.b2 += dy.rowwise().sum();
  const MatrixXd da = ((m.w2.transpose() * dy).array() * (1.0 - h.array().square())).matrix();
  g.w1 += da * z.transpose();
  g.b1 += da.rowwise().sum();
  const MatrixXd dz = m.w1.transpose() * da;
  MatrixXd du = dz.topRows(hidden);
  VectorXd acc = VectorXd::Zero(hidden);  // c_i = mean(u_0..u_i): du_j += Σ_{i>=j} dc_i / (i+1)
  for (Eigen::Index i = len - 1; i >= 0; --i) {
    acc += dz.col(i).tail(hidden) / static_cast<double>(i + 1);
    du.col(i) += acc;
  }
  g.pos_emb.leftCols(len) += du;
  for (std::size_t j = 0; j < subs.size(); ++j) dsubs[j].resize(hidden, subs[j]->cols());
  for (Eigen::Index i = 0; i < len; ++i) {
    const auto ui = static_cast<std::size_t>(i);
    if (token[ui] >= 0)
      g.tok_emb.col(token[ui]) += du.col(i);
    else
      dsubs[static_cast<std::size_t>(origin[ui].first)].col(origin[ui].second) = du.col(i);
  }
  return loss;
}

}  // namespace mllm_training
