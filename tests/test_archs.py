"""Architectures: exact parameter counts per family from Hugging Face configs and the catalog, FLOPs per
token (sliding windows, MLA, MoE activated), and the per-family key maps that refuse to guess.

Golden numbers are published counts (cited per row) or derivations written out here; the configs are the
published config.json files of each model, keys included, trimmed of nothing that matters.
"""

import json
import math

import pytest

from tpopt.catalogs import load_catalog, model_from_hf_config
from tpopt.errors import InputError
from tpopt.models.arch import (
    activated_params,
    attention_flops_per_token,
    embedding_params,
    flops_per_token,
    gemm_params,
    param_count,
)

CAT = load_catalog()

COMMON = {"torch_dtype": "bfloat16", "transformers_version": "4.44.0", "use_cache": True, "bos_token_id": 1,
          "eos_token_id": 2, "initializer_range": 0.02}

GPT2 = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "activation_function": "gelu_new",
        "attn_pdrop": 0.1, "embd_pdrop": 0.1, "resid_pdrop": 0.1, "layer_norm_epsilon": 1e-05, "n_ctx": 1024,
        "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024, "summary_activation": None,
        "summary_first_dropout": 0.1, "summary_proj_to_labels": True, "summary_type": "cls_index",
        "summary_use_proj": True, "task_specific_params": {"text-generation": {"do_sample": True, "max_length": 50}},
        "vocab_size": 50257}
OPT_125M = {"model_type": "opt", "_name_or_path": "facebook/opt-125m", "activation_dropout": 0.0,
            "activation_function": "relu", "architectures": ["OPTForCausalLM"], "attention_dropout": 0.0,
            "do_layer_norm_before": True, "dropout": 0.1, "ffn_dim": 3072, "hidden_size": 768, "init_std": 0.02,
            "layerdrop": 0.0, "max_position_embeddings": 2048, "num_attention_heads": 12, "num_hidden_layers": 12,
            "pad_token_id": 1, "prefix": "</s>", "vocab_size": 50272, "word_embed_proj_dim": 768}


def neox(layers, hidden, heads, ffn, vocab=50304):
    return {"model_type": "gpt_neox", "architectures": ["GPTNeoXForCausalLM"], "hidden_act": "gelu",
            "hidden_size": hidden, "intermediate_size": ffn, "layer_norm_eps": 1e-05, "max_position_embeddings": 2048,
            "num_attention_heads": heads, "num_hidden_layers": layers, "rotary_emb_base": 10000, "rotary_pct": 0.25,
            "tie_word_embeddings": False, "use_parallel_residual": True, "vocab_size": vocab, **COMMON}


BLOOM_560M = {"model_type": "bloom", "apply_residual_connection_post_layernorm": False, "attention_dropout": 0.0,
              "attention_softmax_in_fp32": True, "bias_dropout_fusion": True, "hidden_dropout": 0.0,
              "hidden_size": 1024, "layer_norm_epsilon": 1e-05, "masked_softmax_fusion": True, "n_head": 16,
              "n_inner": None, "n_layer": 24, "offset_alibi": 100, "pad_token_id": 3, "pretraining_tp": 1,
              "skip_bias_add": True, "skip_bias_add_qkv": False, "slow_but_exact": False, "unk_token_id": 0,
              "vocab_size": 250880, **COMMON}
FALCON_7B = {"model_type": "falcon", "alibi": False, "apply_residual_connection_post_layernorm": False,
             "attention_dropout": 0.0, "bias": False, "hidden_dropout": 0.0, "hidden_size": 4544,
             "layer_norm_epsilon": 1e-05, "multi_query": True, "new_decoder_architecture": False,
             "num_attention_heads": 71, "num_hidden_layers": 32, "parallel_attn": True, "vocab_size": 65024, **COMMON}
FALCON_40B = {**FALCON_7B, "hidden_size": 8192, "num_attention_heads": 128, "num_hidden_layers": 60,
              "new_decoder_architecture": True, "num_kv_heads": 8}
MPT_7B = {"model_type": "mpt", "architectures": ["MPTForCausalLM"],
          "attn_config": {"alibi": True, "alibi_bias_max": 8, "attn_impl": "torch", "attn_pdrop": 0,
                          "attn_type": "multihead_attention", "attn_uses_sequence_id": False, "clip_qkv": None,
                          "prefix_lm": False, "qk_ln": False, "softmax_scale": None},
          "d_model": 4096, "emb_pdrop": 0, "embedding_fraction": 1.0, "expansion_ratio": 4,
          "init_config": {"name": "kaiming_normal_"}, "init_device": "cpu", "learned_pos_emb": True,
          "logit_scale": None, "max_seq_len": 2048, "n_heads": 32, "n_layers": 32, "no_bias": True,
          "norm_type": "low_precision_layernorm", "resid_pdrop": 0, "tokenizer_name": "EleutherAI/gpt-neox-20b",
          "verbose": 0, "vocab_size": 50432, "torch_dtype": "bfloat16", "use_cache": False}
PHI_2 = {"model_type": "phi", "_name_or_path": "microsoft/phi-2", "attention_dropout": 0.0, "embd_pdrop": 0.0,
         "hidden_act": "gelu_new", "hidden_size": 2560, "intermediate_size": 10240, "layer_norm_eps": 1e-05,
         "max_position_embeddings": 2048, "num_attention_heads": 32, "num_hidden_layers": 32,
         "num_key_value_heads": 32, "partial_rotary_factor": 0.4, "qk_layernorm": False, "resid_pdrop": 0.1,
         "rope_scaling": None, "rope_theta": 10000.0, "tie_word_embeddings": False, "vocab_size": 51200, **COMMON}
LLAMA3_8B = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "attention_bias": False,
             "attention_dropout": 0.0, "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336,
             "max_position_embeddings": 8192, "mlp_bias": False, "num_attention_heads": 32, "num_hidden_layers": 32,
             "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": None,
             "rope_theta": 500000.0, "tie_word_embeddings": False, "vocab_size": 128256, **COMMON}
MISTRAL_7B = {**LLAMA3_8B, "model_type": "mistral", "vocab_size": 32000, "sliding_window": 4096,
              "rope_theta": 10000.0}
for _k in ("attention_bias", "mlp_bias", "pretraining_tp"):
    MISTRAL_7B.pop(_k)
QWEN25_7B = {"model_type": "qwen2", "hidden_act": "silu", "hidden_size": 3584, "intermediate_size": 18944,
             "max_position_embeddings": 131072, "max_window_layers": 28, "num_attention_heads": 28,
             "num_hidden_layers": 28, "num_key_value_heads": 4, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
             "sliding_window": 131072, "tie_word_embeddings": False, "use_sliding_window": False,
             "vocab_size": 152064, "attention_dropout": 0.0, **COMMON}
QWEN3_8B = {"model_type": "qwen3", "attention_bias": False, "head_dim": 128, "hidden_act": "silu",
            "hidden_size": 4096, "intermediate_size": 12288, "max_window_layers": 36, "num_attention_heads": 32,
            "num_hidden_layers": 36, "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "rope_scaling": None,
            "rope_theta": 1000000, "sliding_window": None, "tie_word_embeddings": False, "use_sliding_window": False,
            "vocab_size": 151936, "attention_dropout": 0.0, **COMMON}
GEMMA_7B = {"model_type": "gemma", "attention_bias": False, "head_dim": 256, "hidden_act": "gelu",
            "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 3072, "intermediate_size": 24576,
            "max_position_embeddings": 8192, "num_attention_heads": 16, "num_hidden_layers": 28,
            "num_key_value_heads": 16, "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "vocab_size": 256000,
            "attention_dropout": 0.0, **COMMON}
GEMMA2_9B = {**GEMMA_7B, "model_type": "gemma2", "attn_logit_softcapping": 50.0, "cache_implementation": "hybrid",
             "final_logit_softcapping": 30.0, "hidden_size": 3584, "intermediate_size": 14336,
             "num_hidden_layers": 42, "num_key_value_heads": 8, "query_pre_attn_scalar": 256,
             "sliding_window": 4096, "sliding_window_size": 4096}
GEMMA3_1B = {**GEMMA_7B, "model_type": "gemma3_text", "attn_logit_softcapping": None, "cache_implementation": "hybrid",
             "final_logit_softcapping": None, "hidden_size": 1152, "intermediate_size": 6912, "num_attention_heads": 4,
             "num_hidden_layers": 26, "num_key_value_heads": 1, "query_pre_attn_scalar": 256,
             "rope_local_base_freq": 10000, "rope_scaling": None, "sliding_window": 512, "sliding_window_pattern": 6,
             "vocab_size": 262144}
PHI3_MINI = {"model_type": "phi3", "attention_bias": False, "attention_dropout": 0.0, "embd_pdrop": 0.0,
             "hidden_act": "silu", "hidden_size": 3072, "intermediate_size": 8192, "max_position_embeddings": 4096,
             "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
             "original_max_position_embeddings": 4096, "pad_token_id": 32000, "resid_pdrop": 0.0, "rms_norm_eps": 1e-05,
             "rope_scaling": None, "rope_theta": 10000.0, "sliding_window": 2047, "tie_word_embeddings": False,
             "vocab_size": 32064, "auto_map": {"AutoConfig": "configuration_phi3.Phi3Config"}}
MIXTRAL = {"model_type": "mixtral", "architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0,
           "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 32768,
           "num_attention_heads": 32, "num_experts_per_tok": 2, "num_hidden_layers": 32, "num_key_value_heads": 8,
           "num_local_experts": 8, "output_router_logits": False, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0,
           "router_aux_loss_coef": 0.02, "sliding_window": None, "tie_word_embeddings": False, "vocab_size": 32000,
           **COMMON}
QWEN15_MOE = {"model_type": "qwen2_moe", "decoder_sparse_step": 1, "hidden_act": "silu", "hidden_size": 2048,
              "intermediate_size": 5632, "max_position_embeddings": 8192, "max_window_layers": 21,
              "moe_intermediate_size": 1408, "norm_topk_prob": False, "num_attention_heads": 16,
              "num_experts": 60, "num_experts_per_tok": 4, "num_hidden_layers": 24, "num_key_value_heads": 16,
              "output_router_logits": False, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
              "router_aux_loss_coef": 0.001, "shared_expert_intermediate_size": 5632, "sliding_window": 32768,
              "tie_word_embeddings": False, "use_sliding_window": False, "vocab_size": 151936, **COMMON}
QWEN3_30B_A3B = {"model_type": "qwen3_moe", "attention_bias": False, "attention_dropout": 0.0,
                 "decoder_sparse_step": 1, "head_dim": 128, "hidden_act": "silu", "hidden_size": 2048,
                 "intermediate_size": 6144, "max_position_embeddings": 40960, "max_window_layers": 48,
                 "mlp_only_layers": [], "moe_intermediate_size": 768, "norm_topk_prob": True,
                 "num_attention_heads": 32, "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 48,
                 "num_key_value_heads": 4, "output_router_logits": False, "rms_norm_eps": 1e-06, "rope_scaling": None,
                 "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001, "sliding_window": None,
                 "tie_word_embeddings": False, "use_sliding_window": False, "vocab_size": 151936, **COMMON}
DEEPSEEK_V3 = {"model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": False,
               "attention_dropout": 0.0, "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV3Config"},
               "aux_loss_alpha": 0.001, "ep_size": 1, "first_k_dense_replace": 3, "hidden_act": "silu",
               "hidden_size": 7168, "intermediate_size": 18432, "kv_lora_rank": 512,
               "max_position_embeddings": 163840, "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_group": 8,
               "n_routed_experts": 256, "n_shared_experts": 1, "norm_topk_prob": True, "num_attention_heads": 128,
               "num_experts_per_tok": 8, "num_hidden_layers": 61, "num_key_value_heads": 128,
               "num_nextn_predict_layers": 1, "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
               "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                       "weight_block_size": [128, 128]},
               "rms_norm_eps": 1e-06, "rope_scaling": {"factor": 40, "type": "yarn"}, "rope_theta": 10000,
               "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "seq_aux": True, "tie_word_embeddings": False,
               "topk_group": 4, "topk_method": "noaux_tc", "v_head_dim": 128, "vocab_size": 129280, **COMMON}
DEEPSEEK_V2_LITE = {**{k: v for k, v in DEEPSEEK_V3.items()
                       if k not in ("num_nextn_predict_layers", "quantization_config")},
                    "model_type": "deepseek_v2", "first_k_dense_replace": 1, "hidden_size": 2048,
                    "intermediate_size": 10944, "moe_intermediate_size": 1408, "n_routed_experts": 64,
                    "n_shared_experts": 2, "num_attention_heads": 16, "num_key_value_heads": 16,
                    "num_experts_per_tok": 6, "num_hidden_layers": 27, "q_lora_rank": None, "vocab_size": 102400,
                    "scoring_func": "softmax", "topk_method": "greedy", "n_group": 1, "topk_group": 1}
GPT_OSS_120B = {"model_type": "gpt_oss", "architectures": ["GptOssForCausalLM"], "attention_bias": True,
                "attention_dropout": 0.0, "eos_token_id": 200002, "experts_per_token": 4, "head_dim": 64,
                "hidden_act": "silu", "hidden_size": 2880, "initial_context_length": 4096, "intermediate_size": 2880,
                "layer_types": ["sliding_attention", "full_attention"] * 18, "max_position_embeddings": 131072,
                "num_attention_heads": 64, "num_experts_per_tok": 4, "num_hidden_layers": 36, "num_key_value_heads": 8,
                "num_local_experts": 128, "output_router_logits": False, "pad_token_id": 199999,
                "quantization_config": {"quant_method": "mxfp4"}, "rms_norm_eps": 1e-05,
                "rope_scaling": {"factor": 32.0, "rope_type": "yarn"}, "rope_theta": 150000,
                "router_aux_loss_coef": 0.9, "sliding_window": 128, "swiglu_limit": 7.0, "tie_word_embeddings": False,
                "vocab_size": 201088, "use_cache": True}


def cut(x: float, digits: int = 1) -> float:
    """x in billions truncated to the printed digits: Qwen and DeepSeek print 3.353B as "3.3B"."""
    return int(x / 1e9 * 10**digits) / 10**digits


def hf(tmp_path, cfg, name="config.json"):
    p = tmp_path / name
    p.write_text(json.dumps(cfg))
    return model_from_hf_config(p)


# Published totals, each with its source. (config, expected N, catalog twin or None)
PUBLISHED = [
    pytest.param(GPT2, 124_439_808, "gpt2", id="gpt2-124M (Radford et al. 2019; HF model card)"),
    pytest.param(neox(6, 512, 8, 2048), 70_426_624, None, id="pythia-70m (Pythia table 1)"),
    pytest.param(neox(12, 768, 12, 3072), 162_322_944, None, id="pythia-160m (Pythia table 1)"),
    pytest.param(neox(24, 1024, 16, 4096), 405_334_016, None, id="pythia-410m (Pythia table 1)"),
    pytest.param(neox(32, 4096, 32, 16384, 50432), 6_857_302_016, "pythia-6.9b", id="pythia-6.9b (Pythia table 1)"),
    pytest.param(BLOOM_560M, 559_214_592, None, id="bloom-560m (BLOOM model card)"),
    pytest.param(LLAMA3_8B, 8_030_261_248, "llama3-8b", id="llama3-8b (config / model card)"),
]


@pytest.mark.parametrize("cfg,n,twin", PUBLISHED)
def test_published_parameter_counts(tmp_path, cfg, n, twin):
    m = hf(tmp_path, cfg)
    assert param_count(m) == n
    if twin:  # the catalog entry and the config agree exactly
        assert param_count(CAT.model(twin)) == n


@pytest.mark.parametrize("name,n", [
    ("bloom-176b", 176_247_271_424),  # BLOOM model card
    ("bloom-7b1", 7_069_016_064),  # BLOOM-7b1 model card
    ("pythia-12b", 11_846_072_320),  # Pythia table 1
    ("gpt-neox-20b", 20_554_567_680),  # Black et al. 2022
    ("gpt2-xl", 1_557_611_200),  # GPT-2 XL (1.5B)
])
def test_published_catalog_counts(name, n):
    assert param_count(CAT.model(name)) == n


def test_published_rounded_catalog_counts():
    # Llama 3.2 model cards print truncated billions ("1.23B", "3.21B"); Qwen2.5-72B 72.7B, Phi-4 14.7B rounded
    assert cut(param_count(CAT.model("llama3.2-1b")), 2) == 1.23
    assert cut(param_count(CAT.model("llama3.2-3b")), 2) == 3.21
    assert round(param_count(CAT.model("qwen2.5-72b")) / 1e9, 1) == 72.7
    assert round(param_count(CAT.model("phi-4")) / 1e9, 1) == 14.7


def test_gemma_non_embedding_counts_match_the_reports(tmp_path):
    # Gemma report (2024) table 1 and Gemma 2 report table 2: non-embedding parameters
    assert param_count(hf(tmp_path, GEMMA_7B)) - embedding_params(hf(tmp_path, GEMMA_7B)) == 7_751_248_896
    g2 = hf(tmp_path, GEMMA2_9B)
    assert param_count(g2) - embedding_params(g2) == 8_324_201_984
    assert (g2.layer_norms, g2.sliding_window, g2.window_layers) == (4, 4096, 21)  # local on even blocks
    for name, n in (("gemma-2b", 1_981_884_416), ("gemma-7b", 7_751_248_896), ("gemma2-9b", 8_324_201_984),
                    ("gemma2-27b", 26_047_480_320)):
        m = CAT.model(name)
        assert param_count(m) - embedding_params(m) == n, name
    assert param_count(g2) == param_count(CAT.model("gemma2-9b"))


def test_derived_counts_gpt_style(tmp_path):
    # OPT-125m: 12 GPT-2-sized blocks (7,087,872 each: qkv 3(h^2+h), o h^2+h, MLP 2 h f + f + h, 2 LN 4h),
    # tied embedding 50272 x 768, learned positions (2048 + 2) x 768, final LN 2 x 768
    h, f = 768, 3072
    block = 4 * (h * h + h) + 2 * h * f + f + h + 4 * h
    assert block == 7_087_872
    assert param_count(hf(tmp_path, OPT_125M)) == 12 * block + 50272 * h + 2050 * h + 2 * h == 125_239_296
    # Falcon-7B: multi-query (q 71 x 64 + k, v 64 each), one LayerNorm per parallel block, no biases, tied
    h = 4544
    block = h * (71 * 64 + 2 * 64) + h * h + 2 * h * 4 * h + 2 * h
    falcon = hf(tmp_path, FALCON_7B)
    assert param_count(falcon) == 32 * block + 65024 * h + 2 * h == 6_921_720_704
    assert falcon.parallel_block and falcon.layer_norms == 1 and falcon.kv_heads == 1 and not falcon.linear_bias
    # Falcon-40B: new decoder architecture, 8 KV groups, two LayerNorms per block
    h = 8192
    block = h * (128 * 64 + 2 * 8 * 64) + h * h + 2 * h * 4 * h + 2 * 2 * h
    assert param_count(hf(tmp_path, FALCON_40B)) == 60 * block + 65024 * h + 2 * h
    assert param_count(hf(tmp_path, FALCON_40B)) == param_count(CAT.model("falcon-40b"))
    # MPT-7B: ALiBi (no position table although learned_pos_emb is true), no biases anywhere, LayerNorm weight only
    h = 4096
    mpt = hf(tmp_path, MPT_7B)
    assert param_count(mpt) == 32 * (4 * h * h + 8 * h * h + 2 * h) + 50432 * h + h == 6_649_286_656
    assert mpt.positions == "alibi" and mpt.learned_positions == 0
    # BLOOM-560m uses ALiBi and an embedding LayerNorm (2h more than GPT-style)
    bloom = hf(tmp_path, BLOOM_560M)
    assert bloom.positions == "alibi" and bloom.embedding_norm
    # Phi-2: parallel block, one LayerNorm, biases everywhere, a biased untied LM head
    h, f, v = 2560, 10240, 51200
    block = 4 * (h * h + h) + h * f + f + f * h + h + 2 * h
    assert param_count(hf(tmp_path, PHI_2)) == 32 * block + 2 * v * h + v + 2 * h == 2_779_683_840


def test_derived_counts_llama_style(tmp_path):
    # Mistral-7B = Llama-3-8B blocks with a 32000 vocabulary; 4096-token window on every layer
    mistral = hf(tmp_path, MISTRAL_7B)
    assert param_count(mistral) == 8_030_261_248 - 2 * (128256 - 32000) * 4096
    assert (mistral.sliding_window, mistral.window_layers) == (4096, 32)
    # Qwen2.5-7B: q/k/v biases always on (Qwen2 architecture); 7.61B (Qwen2.5 report)
    q = hf(tmp_path, QWEN25_7B)
    assert q.qkv_bias and not q.o_bias and q.window_layers == 0  # use_sliding_window false
    assert round(param_count(q) / 1e9, 2) == 7.62 and param_count(q) == param_count(CAT.model("qwen2.5-7b"))
    # Qwen3-8B from its own config: the chapter's N
    assert param_count(hf(tmp_path, QWEN3_8B)) == 8_190_735_360
    # Phi-3-mini: Llama-like, 3.8B (Phi-3 report)
    assert round(param_count(hf(tmp_path, PHI3_MINI)) / 1e9, 1) == 3.8
    # Gemma 3 1B: q/k norms, 4 norms per block, 5 local layers per global one (26 layers: globals 5, 11, 17, 23)
    g3 = hf(tmp_path, GEMMA3_1B)
    h = 1152
    block = h * 1024 + 2 * h * 256 + 1024 * h + 3 * h * 6912 + 4 * h + 2 * 256
    assert param_count(g3) == 26 * block + 262144 * h + h == 999_885_952
    assert g3.window_layers == 22 and g3.qk_norm and g3.activation == "gelu_tanh"


def test_moe_total_and_activated(tmp_path):
    mix = hf(tmp_path, MIXTRAL)
    assert param_count(mix) == param_count(CAT.model("mixtral-8x7b")) == 46_702_792_704
    assert round(param_count(mix) / 1e9, 1) == 46.7 and round(activated_params(mix) / 1e9, 1) == 12.9  # Mixtral paper
    q15 = hf(tmp_path, QWEN15_MOE)  # Qwen blog: 14.3B total, 2.7B activated; shared expert with a sigmoid gate
    assert (round(param_count(q15) / 1e9, 1), round(activated_params(q15) / 1e9, 1)) == (14.3, 2.7)
    assert q15.shared_experts == 1 and q15.shared_expert_gate and q15.qkv_bias
    q3 = hf(tmp_path, QWEN3_30B_A3B)  # Qwen3 report: 30.5B total, 3.3B activated (3.35B, truncated)
    assert (cut(param_count(q3)), cut(activated_params(q3))) == (30.5, 3.3)
    assert param_count(q3) == param_count(CAT.model("qwen3-30b-a3b"))
    q235 = CAT.model("qwen3-235b-a22b")  # 235B total, 22B activated
    assert (round(param_count(q235) / 1e9), round(activated_params(q235) / 1e9)) == (235, 22)
    oss = hf(tmp_path, GPT_OSS_120B)  # model card: 116.83B total, 5.13B active (input embedding excluded)
    assert round(param_count(oss) / 1e9, 2) == 116.83
    assert round(activated_params(oss, input_embedding=False) / 1e9, 2) == 5.13
    assert oss.window_layers == 18 and oss.attn_sinks and oss.router_bias and oss.mlp_bias
    assert param_count(oss) == param_count(CAT.model("gpt-oss-120b"))
    # YaRN, factor 32, no mscale: attention factor 0.1 ln 32 + 1 (transformers' _compute_yarn_parameters)
    assert oss.rope_attention_factor == pytest.approx(0.1 * math.log(32.0) + 1.0)
    assert CAT.model("gpt-oss-120b").rope_attention_factor == pytest.approx(oss.rope_attention_factor, abs=1e-6)
    # swiglu_limit 7.0 (config.json): the clamp of the gated activation's inputs, read from the config as the catalog
    assert oss.activation_clamp == 7.0 == CAT.model("gpt-oss-120b").activation_clamp
    oss20 = CAT.model("gpt-oss-20b")  # model card: 20.91B total, 3.61B active
    assert (round(param_count(oss20) / 1e9, 2), round(activated_params(oss20, input_embedding=False) / 1e9, 2)) \
        == (20.91, 3.61)


def test_deepseek_mla_and_mtp(tmp_path):
    v3 = CAT.model("deepseek-v3")  # DeepSeek-V3 report: 671B total, 37B activated
    assert round(param_count(v3) / 1e9) == 671 and round(activated_params(v3, input_embedding=False) / 1e9) == 37
    # one MoE block, derived: MLA (q 7168x1536 + 1536x128x192, kv 7168x576 + 512x128x256, o 128x128x7168, two
    # latent norms), 256 + 1 experts of 3 x 7168 x 2048, router 7168 x 256, two RMSNorms
    attn = 7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256 + 128 * 128 * 7168 + 1536 + 512
    moe_block = attn + 257 * 3 * 7168 * 2048 + 7168 * 256 + 2 * 7168
    dense_block = attn + 3 * 7168 * 18432 + 2 * 7168
    assert param_count(v3) == 3 * dense_block + 58 * moe_block + 2 * 129280 * 7168 + 7168
    # the released config carries one MTP module: it adds a MoE block, a 2h x h projection and 3 norms
    cfg = hf(tmp_path, DEEPSEEK_V3)
    assert cfg.mtp_layers == 1
    assert param_count(cfg) == param_count(v3) + moe_block + 2 * 7168 * 7168 + 3 * 7168
    assert any("multi-token" in n for n in cfg.extra["notes"]) and any("quantization" in n for n in cfg.extra["notes"])
    # ... and one more LM-head pass, block and projection in the FLOPs per token
    act_block = attn - 1536 - 512 + 9 * 3 * 7168 * 2048 + 7168 * 256
    assert gemm_params(cfg) == gemm_params(v3) + act_block + 2 * 7168 * 7168 + 129280 * 7168
    lite = hf(tmp_path, DEEPSEEK_V2_LITE)  # DeepSeek-V2 report: 15.7B total, 2.4B activated
    assert lite.q_lora_rank == 0 and lite.dense_layers == 1
    assert cut(param_count(lite)) == 15.7 and cut(activated_params(lite, input_embedding=False)) == 2.4
    assert param_count(lite) == param_count(CAT.model("deepseek-v2-lite"))
    v2 = CAT.model("deepseek-v2")  # 236B total, 21B activated
    assert round(param_count(v2) / 1e9) == 236 and round(activated_params(v2, input_embedding=False) / 1e9) == 21


def test_flops_per_activated_token():
    s = 4096
    # Mixtral: 6 x (attention + 2 of 8 experts + router per block, + LM head) + causal attention
    mix = CAT.model("mixtral-8x7b")
    attn = 2 * 4096 * 4096 + 2 * 4096 * 1024
    gemm = 32 * (attn + 2 * 3 * 4096 * 14336 + 4096 * 8) + 32000 * 4096
    assert gemm_params(mix) == gemm
    assert flops_per_token(mix, s) == pytest.approx(6 * gemm + 12 * 32 * 4096 * (s + 1) / 2, rel=1e-15)
    # MLA: QK^T over nope + rope = 192 dims per head, PV over 128
    v3 = CAT.model("deepseek-v3")
    assert attention_flops_per_token(v3, s) == pytest.approx(6 * 128 * (192 + 128) * 61 * (s + 1) / 2, rel=1e-12)
    # sliding window: a query past the window sees w keys; mean over s = 8192 with w = 4096
    mistral = CAT.model("mistral-7b")
    w, s2 = 4096, 8192
    mean_keys = (w * (w + 1) / 2 + (s2 - w) * w) / s2
    assert attention_flops_per_token(mistral, s2) == pytest.approx(12 * 32 * 4096 * mean_keys, rel=1e-12)
    assert attention_flops_per_token(mistral, 4096) == pytest.approx(12 * 32 * 4096 * 4097 / 2, rel=1e-12)
    # Gemma 2: window on 21 of 42 layers only
    g2 = CAT.model("gemma2-9b")
    full, local = (s2 + 1) / 2, mean_keys
    assert attention_flops_per_token(g2, s2) == pytest.approx(12 * 4096 * (21 * full + 21 * local), rel=1e-12)


# ------------------------------------------------------------------------------- key maps refuse to guess

def test_llama_config_with_gelu_is_geglu_not_swiglu(tmp_path):
    m = hf(tmp_path, {**LLAMA3_8B, "hidden_act": "gelu"})
    assert m.gated_mlp and m.activation == "gelu"  # LlamaMLP: down(act(gate) * up): a GeGLU
    assert hf(tmp_path, LLAMA3_8B).activation == "silu"
    with pytest.raises(InputError, match="hidden_act.*not an activation"):
        hf(tmp_path, {**LLAMA3_8B, "hidden_act": "mish"})


@pytest.mark.parametrize("cfg,extra,message", [
    (LLAMA3_8B, {"num_experts_per_layer": 4}, "not understood for Llama.*num_experts_per_layer"),
    (GPT2, {"n_experts": 8}, "not understood for GPT-2.*n_experts"),
    (LLAMA3_8B, {"model_type": "mamba"}, "model_type 'mamba' is not supported"),
    (OPT_125M, {"word_embed_proj_dim": 512}, "word_embed_proj_dim"),
    (OPT_125M, {"do_layer_norm_before": False}, "post-norm"),
    (PHI_2, {"qk_layernorm": True}, "qk_layernorm"),
    (MPT_7B, {"attn_config": {**MPT_7B["attn_config"], "qk_ln": True}}, "qk_ln"),
    (MPT_7B, {"attn_config": {**MPT_7B["attn_config"], "new_switch": 1}}, "attn_config key.*new_switch"),
    (GEMMA3_1B, {"use_bidirectional_attention": True}, "use_bidirectional_attention"),
    (QWEN25_7B, {"use_sliding_window": True}, "layer_types"),
    (DEEPSEEK_V3, {"moe_layer_freq": 2}, "moe_layer_freq"),
    (MIXTRAL, {"num_experts_per_tok": 9}, "top_k must be between 1 and experts"),
    (MIXTRAL, {"num_local_experts": None}, "num_local_experts"),
    (BLOOM_560M, {"n_inner": 1000}, "n_inner"),
    (LLAMA3_8B, {"num_attention_heads": 0}, "num_attention_heads.*outside"),
    (LLAMA3_8B, {"num_attention_heads": 3}, "hidden .* not a multiple of heads"),
    (LLAMA3_8B, {"hidden_size": "4096"}, "hidden_size: expected a whole number"),
    (LLAMA3_8B, {"tie_word_embeddings": "yes"}, "tie_word_embeddings must be true or false"),
    (LLAMA3_8B, {"vocab_size": 10**12}, "vocab_size.*outside"),
    (GPT_OSS_120B, {"swiglu_limit": "7"}, "swiglu_limit must be a positive number"),
    (GPT_OSS_120B, {"swiglu_limit": -1.0}, "swiglu_limit must be a positive number"),
])
def test_config_errors_are_one_clear_line(tmp_path, cfg, extra, message):
    with pytest.raises(InputError, match=message) as info:
        hf(tmp_path, {**cfg, **extra})
    assert "\n" not in str(info.value)


def test_missing_model_type_and_multimodal(tmp_path):
    with pytest.raises(InputError, match="no model_type"):
        hf(tmp_path, {k: v for k, v in LLAMA3_8B.items() if k != "model_type"})
    with pytest.raises(InputError, match="multimodal"):
        hf(tmp_path, {"model_type": "gemma3", "text_config": {"model_type": "gemma3_text"}, "vision_config": {}})


def test_dropout_is_stated_as_an_assumption(tmp_path):
    m = hf(tmp_path, GPT2)
    assert any("resid_pdrop" in n for n in m.extra["notes"])
    assert not hf(tmp_path, LLAMA3_8B).extra["notes"]


def test_every_family_builds_and_matches_catalog_layout(tmp_path):
    # each family's key map reads every config above without an unknown key
    for cfg in (GPT2, OPT_125M, neox(6, 512, 8, 2048), BLOOM_560M, FALCON_7B, FALCON_40B, MPT_7B, PHI_2, LLAMA3_8B,
                MISTRAL_7B, QWEN25_7B, QWEN3_8B, GEMMA_7B, GEMMA2_9B, GEMMA3_1B, PHI3_MINI, MIXTRAL, QWEN15_MOE,
                QWEN3_30B_A3B, DEEPSEEK_V3, DEEPSEEK_V2_LITE, GPT_OSS_120B):
        m = hf(tmp_path, cfg)
        assert param_count(m) > 0 and flops_per_token(m, 2048) > 6 * 0.9 * activated_params(m, input_embedding=False)
