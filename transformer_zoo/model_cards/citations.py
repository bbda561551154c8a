"""The papers a zoo model's architecture comes from, chosen from its config: the family's paper, then the position
scheme, normalisation, activation and attention variant it uses (and LoRA for adapters)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Citation:
    text: str  # one line for people
    bibtex: str


CITATIONS: dict[str, Citation] = {
    "vaswani2017": Citation(
        "Vaswani et al. 2017, *Attention Is All You Need* (NeurIPS): the transformer.",
        "@inproceedings{vaswani2017attention,\n  title={Attention Is All You Need},\n  author={Vaswani, Ashish and "
        "Shazeer, Noam and Parmar, Niki and Uszkoreit, Jakob and Jones, Llion and Gomez, Aidan N. and Kaiser, "
        "{\\L}ukasz and Polosukhin, Illia},\n  booktitle={Advances in Neural Information Processing Systems},\n  "
        "volume={30},\n  year={2017}\n}"),
    "devlin2019": Citation(
        "Devlin et al. 2019, *BERT: Pre-training of Deep Bidirectional Transformers for Language Understanding* "
        "(NAACL): the bidirectional encoder and masked-language-model pretraining.",
        "@inproceedings{devlin2019bert,\n  title={{BERT}: Pre-training of Deep Bidirectional Transformers for "
        "Language Understanding},\n  author={Devlin, Jacob and Chang, Ming-Wei and Lee, Kenton and Toutanova, "
        "Kristina},\n  booktitle={Proceedings of the 2019 Conference of the North American Chapter of the "
        "Association for Computational Linguistics},\n  pages={4171--4186},\n  year={2019}\n}"),
    "radford2019": Citation(
        "Radford et al. 2019, *Language Models are Unsupervised Multitask Learners* (OpenAI): the GPT-2 decoder.",
        "@techreport{radford2019language,\n  title={Language Models are Unsupervised Multitask Learners},\n  "
        "author={Radford, Alec and Wu, Jeffrey and Child, Rewon and Luan, David and Amodei, Dario and Sutskever, "
        "Ilya},\n  institution={OpenAI},\n  year={2019}\n}"),
    "dosovitskiy2021": Citation(
        "Dosovitskiy et al. 2021, *An Image is Worth 16x16 Words: Transformers for Image Recognition at Scale* "
        "(ICLR): the Vision Transformer.",
        "@inproceedings{dosovitskiy2021image,\n  title={An Image is Worth 16x16 Words: Transformers for Image "
        "Recognition at Scale},\n  author={Dosovitskiy, Alexey and Beyer, Lucas and Kolesnikov, Alexander and "
        "Weissenborn, Dirk and Zhai, Xiaohua and Unterthiner, Thomas and Dehghani, Mostafa and Minderer, Matthias "
        "and Heigold, Georg and Gelly, Sylvain and Uszkoreit, Jakob and Houlsby, Neil},\n  booktitle={International "
        "Conference on Learning Representations},\n  year={2021}\n}"),
    "su2021": Citation(
        "Su et al. 2021, *RoFormer: Enhanced Transformer with Rotary Position Embedding* (arXiv:2104.09864): "
        "rotary position embeddings (RoPE).",
        "@article{su2021roformer,\n  title={RoFormer: Enhanced Transformer with Rotary Position Embedding},\n  "
        "author={Su, Jianlin and Lu, Yu and Pan, Shengfeng and Murtadha, Ahmed and Wen, Bo and Liu, Yunfeng},\n  "
        "journal={arXiv preprint arXiv:2104.09864},\n  year={2021}\n}"),
    "press2022": Citation(
        "Press et al. 2022, *Train Short, Test Long: Attention with Linear Biases Enables Input Length "
        "Extrapolation* (ICLR): ALiBi.",
        "@inproceedings{press2022train,\n  title={Train Short, Test Long: Attention with Linear Biases Enables "
        "Input Length Extrapolation},\n  author={Press, Ofir and Smith, Noah A. and Lewis, Mike},\n  "
        "booktitle={International Conference on Learning Representations},\n  year={2022}\n}"),
    "raffel2020": Citation(
        "Raffel et al. 2020, *Exploring the Limits of Transfer Learning with a Unified Text-to-Text Transformer* "
        "(JMLR): T5's bucketed relative position bias.",
        "@article{raffel2020exploring,\n  title={Exploring the Limits of Transfer Learning with a Unified "
        "Text-to-Text Transformer},\n  author={Raffel, Colin and Shazeer, Noam and Roberts, Adam and Lee, "
        "Katherine and Narang, Sharan and Matena, Michael and Zhou, Yanqi and Li, Wei and Liu, Peter J.},\n  "
        "journal={Journal of Machine Learning Research},\n  volume={21},\n  number={140},\n  pages={1--67},\n  "
        "year={2020}\n}"),
    "ba2016": Citation(
        "Ba et al. 2016, *Layer Normalization* (arXiv:1607.06450).",
        "@article{ba2016layer,\n  title={Layer Normalization},\n  author={Ba, Jimmy Lei and Kiros, Jamie Ryan and "
        "Hinton, Geoffrey E.},\n  journal={arXiv preprint arXiv:1607.06450},\n  year={2016}\n}"),
    "zhang2019": Citation(
        "Zhang & Sennrich 2019, *Root Mean Square Layer Normalization* (NeurIPS): RMSNorm.",
        "@inproceedings{zhang2019root,\n  title={Root Mean Square Layer Normalization},\n  author={Zhang, Biao and "
        "Sennrich, Rico},\n  booktitle={Advances in Neural Information Processing Systems},\n  volume={32},\n  "
        "year={2019}\n}"),
    "xiong2020": Citation(
        "Xiong et al. 2020, *On Layer Normalization in the Transformer Architecture* (ICML): pre-LN blocks.",
        "@inproceedings{xiong2020layer,\n  title={On Layer Normalization in the Transformer Architecture},\n  "
        "author={Xiong, Ruibin and Yang, Yunchang and He, Di and Zheng, Kai and Zheng, Shuxin and Xing, Chen and "
        "Zhang, Huishuai and Lan, Yanyan and Wang, Liwei and Liu, Tie-Yan},\n  booktitle={Proceedings of the 37th "
        "International Conference on Machine Learning},\n  pages={10524--10533},\n  year={2020}\n}"),
    "shazeer2020": Citation(
        "Shazeer 2020, *GLU Variants Improve Transformer* (arXiv:2002.05202): SwiGLU / GeGLU / ReGLU feed-forward "
        "layers.",
        "@article{shazeer2020glu,\n  title={{GLU} Variants Improve Transformer},\n  author={Shazeer, Noam},\n  "
        "journal={arXiv preprint arXiv:2002.05202},\n  year={2020}\n}"),
    "shazeer2019": Citation(
        "Shazeer 2019, *Fast Transformer Decoding: One Write-Head is All You Need* (arXiv:1911.02150): "
        "multi-query attention.",
        "@article{shazeer2019fast,\n  title={Fast Transformer Decoding: One Write-Head is All You Need},\n  "
        "author={Shazeer, Noam},\n  journal={arXiv preprint arXiv:1911.02150},\n  year={2019}\n}"),
    "ainslie2023": Citation(
        "Ainslie et al. 2023, *GQA: Training Generalized Multi-Query Transformer Models from Multi-Head "
        "Checkpoints* (EMNLP): grouped-query attention.",
        "@inproceedings{ainslie2023gqa,\n  title={{GQA}: Training Generalized Multi-Query Transformer Models from "
        "Multi-Head Checkpoints},\n  author={Ainslie, Joshua and Lee-Thorp, James and de Jong, Michiel and "
        "Zemlyanskiy, Yury and Lebr{\\'o}n, Federico and Sanghai, Sumit},\n  booktitle={Proceedings of the 2023 "
        "Conference on Empirical Methods in Natural Language Processing},\n  pages={4895--4901},\n  year={2023}\n}"),
    "hu2022": Citation(
        "Hu et al. 2022, *LoRA: Low-Rank Adaptation of Large Language Models* (ICLR): the adapters.",
        "@inproceedings{hu2022lora,\n  title={{LoRA}: Low-Rank Adaptation of Large Language Models},\n  "
        "author={Hu, Edward J. and Shen, Yelong and Wallis, Phillip and Allen-Zhu, Zeyuan and Li, Yuanzhi and "
        "Wang, Shean and Wang, Lu and Chen, Weizhu},\n  booktitle={International Conference on Learning "
        "Representations},\n  year={2022}\n}"),
}

FAMILY_PAPERS = {
    "zoo_decoder": ["vaswani2017", "radford2019"],
    "zoo_encoder": ["vaswani2017", "devlin2019"],
    "zoo_seq2seq": ["vaswani2017"],
    "zoo_vit": ["vaswani2017", "dosovitskiy2021"],
}
POSITION_PAPERS = {"rope": "su2021", "alibi": "press2022", "relative": "raffel2020"}


def citation_keys(config, *, adapter: bool = False) -> list[str]:
    """Keys of `CITATIONS` for this config, the family's papers first, without repeats."""
    keys = list(FAMILY_PAPERS.get(str(config.model_type), ["vaswani2017"]))
    position = getattr(config, "position_embedding_type", None)
    if position in POSITION_PAPERS:
        keys.append(POSITION_PAPERS[position])
    keys.append("zhang2019" if getattr(config, "norm_type", "layernorm") == "rmsnorm" else "ba2016")
    if getattr(config, "norm_position", None) == "pre":
        keys.append("xiong2020")
    if str(getattr(config, "hidden_act", "")).endswith("glu"):
        keys.append("shazeer2020")
    heads = getattr(config, "num_attention_heads", None)
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    if heads and kv_heads and kv_heads < heads:
        keys.append("shazeer2019" if kv_heads == 1 else "ainslie2023")
    if adapter:
        keys.append("hu2022")
    return list(dict.fromkeys(keys))


def citations_for(config, *, adapter: bool = False) -> list[Citation]:
    return [CITATIONS[key] for key in citation_keys(config, adapter=adapter)]
