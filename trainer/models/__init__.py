"""trainer.models"""
